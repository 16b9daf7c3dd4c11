"""One holding's data path: batches of upstream messages in, sink batches out, acknowledgements
back. Callbacks only: nothing here awaits per message.

The stream's connection hands a :class:`Delivery` every batch one read completed
(:meth:`Delivery.messages_received`). Per batch, not per message: the
:class:`~worker.stream.sequence.Sequencer` reads the seqs (one ``orjson`` parse each), drops
replays and counts gaps; one fence check; one :class:`~worker.sinks.SinkBatch` under the
holding's header; one metric update. At most one batch is in the sink at a time: what arrives
meanwhile waits here and goes as the next batch when the sink acknowledges (seq order holds,
retries included). The checkpoint — :attr:`Delivery.acked_seq`, which renewals and the release
carry — moves only on an acknowledgement. When :data:`MAX_WAITING_RECORDS` or
:data:`MAX_WAITING_BYTES` wait, reading pauses (the socket's buffers fill, then TCP slows the
upstream), so memory per stream stays bounded whatever the sink does. A refused batch is retried
after a backoff, only what the sink did not store.

Fencing: a batch past a per-stream lease's deadline ends the holding (``on_fenced``); past a
session's deadline delivery and reading stop and the delivery waits in the worker's
:class:`~worker.fencing.fence.DeliveryGate` until the session renews. The sink checks the deadline
once more right before it sends.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Final, Protocol

from websockets.frames import Frame

from streamlease import rules
from streamlease.errors import SinkDeadlinePassed, SinkError
from streamlease.telemetry import WorkerMetric
from worker.fencing.fence import DeliveryGate, Fence
from worker.logs import describe, logger
from worker.metrics import WorkerMetrics
from worker.sinks import BatchHeader, Sink, SinkBatch, SinkRecord
from worker.sinks.base import CLOSED
from worker.stream.progress import ProgressWatch

MAX_WAITING_RECORDS: Final = 500
MAX_WAITING_BYTES: Final = 256 * 1024
"""Records (or payload bytes) waiting behind the batch in the sink that pause reading. What a
delivery buffers is then at most two batches' worth: the one in the sink and the one waiting,
each at most this much plus what one read of the socket completed."""
SINK_RETRY_BASE_SECONDS: Final = 0.1
SINK_RETRY_MAX_SECONDS: Final = 2.0


class Reading(Protocol):
    """The connection's reading, as a delivery controls it (the stream's upstream link)."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Delivery:
    """One holding's data path (see the module docstring); the sink's
    :class:`~worker.sinks.BatchOwner` of its batches and the gate's
    :class:`~worker.fencing.fence.Pausable`."""

    __slots__ = (
        "_backpressure",
        "_ending",
        "_fence",
        "_fenced_since",
        "_gaps_counted",
        "_gate",
        "_held",
        "_in_flight",
        "_malformed_counted",
        "_metrics",
        "_missing_counted",
        "_on_fenced",
        "_reading",
        "_retry_timer",
        "_sequencer",
        "_settled",
        "_sink",
        "_sink_deadline",
        "_stopped",
        "_waiting",
        "_waiting_bytes",
        "acked_seq",
        "header",
        "on_first_stored",
        "progress",
    )

    def __init__(
        self,
        header: BatchHeader,
        progress: ProgressWatch,
        fence: Fence,
        *,
        sink: Sink,
        metrics: WorkerMetrics,
        gate: DeliveryGate,
        reading: Reading,
        on_fenced: Callable[[], None],
        acked_seq: int,
    ) -> None:
        """``acked_seq``: the checkpoint the holding starts from; ``on_fenced()``: a per-stream
        lease's deadline passed (the holding must end)."""
        self.header = header
        self.progress = progress
        self.acked_seq = acked_seq
        """Highest seq the sink acknowledged: the checkpoint renewals and the release carry."""
        self._sequencer = progress.sequencer
        self._fence = fence
        self._held = fence.checkpoint
        self._sink_deadline = fence.sink_deadline
        self._sink = sink
        self._metrics = metrics
        self._gate = gate
        self._reading = reading
        self._on_fenced = on_fenced
        self._in_flight: SinkBatch | None = None
        self._waiting: list[SinkRecord] = []
        self._waiting_bytes = 0
        self._backpressure = False
        self._fenced_since: float | None = None
        """The monotonic deadline that paused delivery (session fencing); None: delivering."""
        self._retry_timer: asyncio.TimerHandle | None = None
        self._ending = False
        """Graceful end: read nothing more, retry nothing, deliver what came once (drain)."""
        self._stopped = False
        """Abrupt end: submit nothing more."""
        self._settled: asyncio.Event | None = None
        self._malformed_counted = self._gaps_counted = self._missing_counted = 0
        self.on_first_stored: Callable[[int], None] | None = None
        """Called once, with its record count, when the first batch is stored (a trace)."""

    @property
    def buffered_bytes(self) -> int:
        """Payload bytes received and not yet acknowledged by the sink (in it, or waiting)."""
        in_flight = () if self._in_flight is None else self._in_flight.records
        return sum(len(r.payload) for r in in_flight) + sum(len(r.payload) for r in self._waiting)

    # --- the connection's callback -----------------------------------------------------------

    def messages_received(self, messages: list[Frame]) -> None:
        """One read's messages: sequence them, then deliver (or wait behind the sink). Once the
        holding ends nothing more is taken in (the closing connection still reads, to see the
        upstream's close): what came is the next owner's, from the checkpoint on."""
        if self._ending:
            return
        count = len(messages)
        self.progress.received += count
        sequencer = self._sequencer
        before = sequencer.last_seq
        records = sequencer.take(messages, time.time_ns() // 1_000_000)
        taken = len(records)
        if taken != count or (taken and records[-1].seq - before != count):
            self._count_irregular()  # skipped frames or a gap: rare, counted apart
        if not taken:
            return
        self._metrics.incr(WorkerMetric.MESSAGES_RECEIVED, taken)
        size = sum([len(r.payload) for r in records])
        self.progress.received_bytes += size
        if self._in_flight is None and not self._waiting and self._fenced_since is None:
            if self._sink_deadline.remaining_seconds() > 0:
                self._submit(records)
                return
            self._past_deadline()
            if self._stopped:
                return
        self._waiting += records
        self._waiting_bytes += size
        if not self._backpressure and (
            len(self._waiting) >= MAX_WAITING_RECORDS or self._waiting_bytes >= MAX_WAITING_BYTES
        ):
            self._backpressure = True
            self._reading.pause_reading()

    # --- the sink's callbacks ------------------------------------------------------------------

    def batch_stored(self, batch: SinkBatch) -> None:
        """The sink stored ``batch``: move the checkpoint, send what waited."""
        self._in_flight = None
        records = batch.records
        last = records[-1]
        seq = self.acked_seq = last.seq
        held = self._held
        if held is not None:  # a session's slot: its renewals read the seq from here
            held.last_seq = seq
        progress = self.progress
        progress.delivered += len(records)
        progress.acked_seq = seq
        progress.last_message_at_ms = last.received_at_ms
        progress.sink_failures = 0
        first = self.on_first_stored
        if first is not None:
            self.on_first_stored = None
            first(len(records))
        if self._waiting and not self._stopped:
            self._submit_waiting()
        if self._settled is not None and self._in_flight is None:
            self._settled.set()

    def batch_failed(self, batch: SinkBatch, error: SinkError) -> None:
        """The sink did not store ``batch`` (wholly): what it did not store goes back to the
        front of the queue; past the deadline the fence decides, otherwise it is retried after
        a backoff (not once the holding ends)."""
        self._in_flight = None
        if not self._stopped:
            unsent = batch.records if error.unsent is None else list(error.unsent)
            # Only what the sink did not store is sent again: a retry repeats nothing.
            self._waiting[:0] = [r for r in unsent if isinstance(r, SinkRecord)]
            if isinstance(error, SinkDeadlinePassed):
                self._past_deadline()
            else:
                self._refused(error)
        if self._settled is not None:
            self._settled.set()

    def _refused(self, error: SinkError) -> None:
        progress = self.progress
        progress.sink_failures += 1
        progress.sink_error = f"sink refused {progress.sink_failures} writes ({describe(error)})"
        self._metrics.incr(WorkerMetric.SINK_ERRORS)
        logger.warning(
            "sink write failed",
            stream_id=self.header.stream_id,
            epoch=self.header.epoch,
            attempt=progress.sink_failures,
            error=describe(error),
        )
        if self._ending:
            return  # the holding ends: no more attempts
        pause = rules.backoff_seconds(
            min(progress.sink_failures - 1, 10),
            SINK_RETRY_BASE_SECONDS,
            SINK_RETRY_MAX_SECONDS,
            random.random(),
        )
        self._retry_timer = asyncio.get_running_loop().call_later(pause, self._retry)

    def _retry(self) -> None:
        self._retry_timer = None
        if self._in_flight is None and self._waiting and not (self._stopped or self._ending):
            self._submit_waiting()

    # --- the delivery gate's calls (session fencing) -------------------------------------------

    def pause_for_fence(self) -> None:
        """The session's deadline passed: stop reading and delivering (a per-stream lease's
        delivery, or one inside its deadline, ignores it)."""
        if self._fence.pauses and self._fence.remaining_seconds() <= 0:
            self._past_deadline()

    def resume_after_fence(self) -> None:
        """The session renewed: deliver what waited, and read again."""
        passed = self._fenced_since
        if passed is None:
            return
        self._fenced_since = None
        if self._stopped:
            return
        # Nothing is accepted in a span no deadline covered: what came in after the deadline
        # carries the time delivery resumed instead.
        self._waiting = _restamped(self._waiting, passed)
        if self._in_flight is None and self._waiting:
            self._submit_waiting()
        if not (self._backpressure or self._ending):
            self._reading.resume_reading()
        if self._settled is not None and self._in_flight is None:
            self._settled.set()

    # --- the holding's end -------------------------------------------------------------------

    def stop(self, *, graceful: bool) -> None:
        """The holding ends: read nothing more. Graceful: what was received may still go to the
        sink once (:meth:`drain`); abrupt: nothing more is submitted (a batch in the sink cannot
        be recalled and finishes)."""
        self._reading.pause_reading()
        self._ending = True
        if not graceful:
            self._stopped = True
            self._waiting = []
            self._waiting_bytes = 0
            if self._settled is not None:
                self._settled.set()

    async def drain(self, limit_seconds: float) -> None:
        """After a graceful :meth:`stop`: let the sink take what was received (the batch in it,
        then one more with what waited), within ``limit_seconds``; no retries. Nothing is
        submitted once the drain is over, whether it ended or gave up; what the sink still
        holds then is for :meth:`settle`."""
        if self._in_flight is None and self._waiting and self._retry_timer is None:
            self._submit_waiting()
        try:
            await self._until_settled(limit_seconds, while_delivering=True)
        finally:
            self._end_submitting()

    async def settle(self, limit_seconds: float) -> bool:
        """The holding delivers no more: close the batch in the sink (if any) to every send not
        begun yet, then wait at most ``limit_seconds`` for the sink to settle it. True when
        nothing of this holding is in the sink any more.

        Call before the lease is given up (a release, a handover): a batch still in the sink
        then could be written after the next holder began, and a send already begun ends within
        the sink's own call timeout, which the fence margin covers.
        """
        self._end_submitting()
        batch = self._in_flight
        if batch is None:
            return True
        batch.deadline = CLOSED  # the sink looks at it again right before it sends
        return await self._until_settled(limit_seconds, while_delivering=False)

    async def wait_settled(self, limit_seconds: float) -> bool:
        """Wait at most ``limit_seconds`` until nothing of this holding is in the sink (it
        ended abruptly: its deadline is already closed). True when nothing is."""
        return await self._until_settled(limit_seconds, while_delivering=False)

    def close(self) -> None:
        """The holding is over: no timer, no place in the gate."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        self._gate.forget(self)

    # --- internals ---------------------------------------------------------------------------

    def _end_submitting(self) -> None:
        """From now on nothing more is taken in or goes to the sink (the holding is giving its
        lease up)."""
        self._ending = True
        self._stopped = True
        self._waiting = []
        self._waiting_bytes = 0
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None

    async def _until_settled(self, limit_seconds: float, *, while_delivering: bool) -> bool:
        """Wait at most ``limit_seconds`` until no batch is in the sink; ``while_delivering``:
        an abrupt :meth:`stop` ends the wait too. True when none is."""
        if self._in_flight is None:
            return True
        settled = self._settled = asyncio.Event()
        try:
            async with asyncio.timeout(max(0.0, limit_seconds)):
                while self._in_flight is not None and not (while_delivering and self._stopped):
                    settled.clear()
                    await settled.wait()
        except TimeoutError:
            pass
        finally:
            self._settled = None
        return self._in_flight is None

    def _submit_waiting(self) -> None:
        if self._retry_timer is not None or self._fenced_since is not None:
            return
        if self._sink_deadline.remaining_seconds() <= 0:
            self._past_deadline()
            return
        records, self._waiting = self._waiting, []
        self._waiting_bytes = 0
        self._submit(records)
        if self._backpressure:
            self._backpressure = False
            if self._fenced_since is None and not self._ending:
                self._reading.resume_reading()

    def _submit(self, records: list[SinkRecord]) -> None:
        batch = SinkBatch(self.header, records, self._sink_deadline, self)
        self._in_flight = batch
        try:
            self._sink.submit(batch)
        except SinkError as exc:  # the sink is closed (shutdown past its drain)
            self.batch_failed(batch, exc)

    def _past_deadline(self) -> None:
        """No delivery now: a per-stream lease ends (FENCED); a session's stream stops reading
        and waits in the gate for a renewal."""
        if not self._fence.pauses:
            self._on_fenced()
            return
        if self._fenced_since is None:
            self._fenced_since = self._fence.deadline_mono
            self._reading.pause_reading()
            self._gate.hold(self)

    def _count_irregular(self) -> None:
        """Metrics (and a log line) for what the last batch had besides messages: undeliverable
        frames, gaps. Replays are only counted by the sequencer."""
        sequencer = self._sequencer
        malformed = sequencer.malformed - self._malformed_counted
        gaps = sequencer.gaps - self._gaps_counted
        missing = sequencer.missing - self._missing_counted
        self._malformed_counted += malformed
        self._gaps_counted += gaps
        self._missing_counted += missing
        if malformed:
            self._metrics.incr(WorkerMetric.MALFORMED_FRAMES, malformed)
        if gaps:
            self._metrics.incr(WorkerMetric.SEQ_GAPS, gaps)
            logger.info(
                "upstream seq gap",
                stream_id=self.header.stream_id,
                seq=sequencer.last_seq,
                gaps=gaps,
                missing=missing,
            )


def _restamped(records: list[SinkRecord], deadline_mono: float) -> list[SinkRecord]:
    """Records taken in after ``deadline_mono`` carry the time delivery resumed instead: no
    message is accepted in a span no deadline covered."""
    now_ms = time.time_ns() // 1_000_000
    passed_ms = now_ms - int((time.monotonic() - deadline_mono) * 1000)
    return [
        r if r.received_at_ms < passed_ms else r._replace(received_at_ms=now_ms) for r in records
    ]
