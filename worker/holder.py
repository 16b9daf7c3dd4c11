"""One held stream: its lease, its upstream connection and its deliveries to the sink.

A :class:`StreamHolder` is created by :mod:`worker.acquisition` after a won acquire. It has two
sides:

* **The data path, in callbacks.** The stream's connection (:mod:`worker.stream.transport`)
  hands the holder every batch of messages one read completed
  (:meth:`StreamHolder.messages_received`). Per batch, not per message: the sequencer reads the
  seqs (one ``orjson`` parse each), drops replays and counts gaps; one fence check; one
  :class:`~worker.sinks.SinkBatch` under the holding's header; one metric update. At most one
  batch is in the sink at a time: what arrives meanwhile waits in the holder and goes as the
  next batch when the sink acknowledges (in seq order, retries included). The checkpoint —
  ``acked_seq``, which the renewals and the release carry — moves only then. When
  :data:`MAX_WAITING_RECORDS` or :data:`MAX_WAITING_BYTES` wait, reading pauses (the socket's
  buffers fill, then TCP slows the upstream): memory per stream stays bounded whatever the sink
  does. A sink failure is retried with backoff (only the records it did not store).
* **The lifecycle, in one task** (:meth:`StreamHolder.run`): the upstream link connects and
  reconnects (:mod:`worker.stream.link`) until an end is requested or the upstream ends the
  stream; then the last steps its :class:`EndReason` calls for.

Fencing: past a per-stream lease's deadline (a timer) the holding ends (FENCED). Past a
session's deadline the holder stops reading and delivering and waits in the worker's
:class:`~worker.fence.DeliveryGate` until the session renews (resume) or is lost (the worker
ends every holder LOST). The sink checks the deadline once more right before it sends. An end
request from another task (stop, shed, shutdown, lost) interrupts the link at once; a batch in
the sink is never recalled, and after an abrupt end nothing more is submitted.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine
from enum import StrEnum
from typing import Any, Final, TypeVar

from websockets.frames import Frame

from streamlease import rules
from streamlease.errors import (
    LeaseLost,
    SinkDeadlinePassed,
    SinkError,
    StoreError,
    UpstreamRejected,
)
from streamlease.lease_events import LeaseEventKind
from streamlease.model import Lease, Stream
from streamlease.profile import DEFAULT_PROFILE, Profile, ProfileError
from streamlease.schema import ConnectionState, DesiredState
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fence import Fence
from worker.logs import describe, logger
from worker.secrets import Secrets
from worker.sinks import BatchHeader, SinkBatch, SinkRecord
from worker.stream.link import HeadersSource, UpstreamEvent, UpstreamEventKind, UpstreamLink
from worker.stream.progress import StreamProgress
from worker.stream.sequence import Sequencer

_T = TypeVar("_T")

MAX_WAITING_RECORDS: Final = 500
MAX_WAITING_BYTES: Final = 256 * 1024
"""Records (or payload bytes) waiting behind the batch in the sink that pause reading. What a
holder buffers is then at most two batches' worth: the one in the sink and the one waiting,
each at most this much plus what one read of the socket completed."""
SINK_RETRY_BASE_SECONDS: Final = 0.1
SINK_RETRY_MAX_SECONDS: Final = 2.0
RELEASE_RETRY_SECONDS: Final = 0.2
"""Pause between release attempts that got no answer (per-stream leases: until the fencing
deadline; sessions: while the session lives)."""
BEST_EFFORT_RELEASE_SECONDS: Final = 2.0
"""How long a fenced holder tries to release its lapsed lease before giving up."""
DRAIN_SECONDS: Final = 10.0
"""How long a graceful end waits for the sink to take what was received (bounded by the
deadline too: the sink sends nothing after it)."""

_LINK_STATES: Final = {
    UpstreamEventKind.CONNECTED: ConnectionState.CONNECTED,
    UpstreamEventKind.RETRYING: ConnectionState.RETRYING,
    UpstreamEventKind.REJECTED: ConnectionState.REJECTED,
}


class EndReason(StrEnum):
    """Why a holder stops holding its stream."""

    STOPPED = "stopped"
    """desired_state became STOPPED: close 1000, final checkpoint, release, no handoff."""
    SHED = "shed"
    """The rebalancer gives it away: final checkpoint, release, handoff, close 1001."""
    SHUTDOWN = "shutdown"
    """The worker is draining: as SHED."""
    ENDED = "ended"
    """The upstream finished the stream (close 1000): release it STOPPED, no handoff."""
    FAILED = "failed"
    """An unexpected error in the holder: release with ``last_error``, then a handoff."""
    LOST = "lost"
    """DynamoDB says the lease (or the session) is not ours: stop at once, write nothing more."""
    FENCED = "fenced"
    """A per-stream lease's fencing deadline passed without a renewal: stop at once."""


GRACEFUL: Final = frozenset(
    {EndReason.STOPPED, EndReason.SHED, EndReason.SHUTDOWN, EndReason.ENDED, EndReason.FAILED}
)
GIVEN_AWAY: Final = frozenset({EndReason.SHED, EndReason.SHUTDOWN})
"""Ends after which this worker leaves the stream to others for a while."""
_PRIORITY: Final = {
    EndReason.SHED: 0,
    EndReason.SHUTDOWN: 1,
    EndReason.FAILED: 2,
    EndReason.ENDED: 3,
    EndReason.STOPPED: 3,
    EndReason.FENCED: 4,
    EndReason.LOST: 4,
}
"""A later end request replaces an earlier one only with a higher priority: losing the lease
during a graceful drain stops the drain; a second abrupt reason changes nothing."""


class StreamHolder:
    """Holds one stream under one lease epoch until :meth:`request_end` (or, for a per-stream
    lease, its deadline). It is its connections' :class:`~worker.stream.transport.UpstreamHandler`
    and its batches' :class:`~worker.sinks.BatchOwner`."""

    def __init__(
        self, lease: Lease, ctx: WorkerContext, fence: Fence, *, acquired_mono: float
    ) -> None:
        """``fence``: the deadline given by the acquire and whatever moves it."""
        self.lease = lease
        self.stream_id = lease.stream_id
        self.epoch = lease.epoch
        self.owner = lease.owner
        self.acquired_mono = acquired_mono
        self.fence = fence
        self.acked_seq = lease.last_seq
        """Highest seq the sink acknowledged: the checkpoint renewals and the release carry."""
        self.end_reason: EndReason | None = None
        self.header = BatchHeader(lease.stream_id, lease.epoch, lease.owner)
        self._ctx = ctx
        self._settings = ctx.settings
        self._sink = ctx.sink
        self._metrics = ctx.metrics
        self._failure: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._interruptible = False
        self._interrupting = False
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._retry_timer: asyncio.TimerHandle | None = None
        self._in_flight: SinkBatch | None = None
        self._waiting: list[SinkRecord] = []
        self._waiting_bytes = 0
        self._backpressure = False
        self._fenced_since: float | None = None
        """Monotonic deadline that paused delivery (session fencing), None while delivering."""
        self._settled: asyncio.Event | None = None
        self._malformed_counted = self._gaps_counted = self._missing_counted = 0
        profile = self._profile(lease)
        self._sequencer = Sequencer(profile.seq_path, lease.last_seq)
        self.progress = StreamProgress(self._sequencer, profile.idle_seconds)
        secrets = ctx.secrets
        self._link = UpstreamLink(
            lease.stream_id,
            lease.ws_url,
            ctx.settings,
            self.messages_received,
            resume_from=self._resume_from,
            on_event=self._on_event,
            profile=profile,
            headers=_headers_for(profile, secrets),
            forget_secrets=None if secrets is None else lambda: secrets.forget(profile.secrets),
            keepalive=ctx.keepalive,
        )

    def _profile(self, lease: Lease) -> Profile:
        try:
            return Profile.from_item(lease.profile)
        except ProfileError as exc:
            self._failure = f"stream profile unreadable ({exc.field})"
            return DEFAULT_PROFILE

    # --- what other tasks call -----------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """True until an end was requested."""
        return self.end_reason is None

    @property
    def deadline_mono(self) -> float:
        """Until when this holder may deliver (monotonic seconds)."""
        return self.fence.deadline_mono

    @property
    def buffered_bytes(self) -> int:
        """Payload bytes received and not yet acknowledged by the sink (in it, or waiting)."""
        in_flight = () if self._in_flight is None else self._in_flight.records
        return sum(len(r.payload) for r in in_flight) + sum(len(r.payload) for r in self._waiting)

    def request_end(self, reason: EndReason, detail: str | None = None) -> None:
        """Ask the holder to end for ``reason`` (see :data:`_PRIORITY` for concurrent asks):
        reading stops and the link is interrupted now; a batch in the sink finishes."""
        current = self.end_reason
        if current is not None and _PRIORITY[reason] <= _PRIORITY[current]:
            return
        self.end_reason = reason
        if reason in (EndReason.FAILED, EndReason.ENDED) and detail:
            self._failure = detail
        self._link.pause_reading()
        if reason not in GRACEFUL:
            self._waiting = []
            self._waiting_bytes = 0
            if self._settled is not None:  # a drain in progress stops here
                self._settled.set()
        self._interrupt()

    def extend(self, sent_mono: float) -> float | None:
        """A renewal of a per-stream lease sent at ``sent_mono`` succeeded: move the deadline.

        Returns the deadline now in force, or None when the holder no longer delivers (lost,
        fenced, or the answer came back after the deadline it would set: a renewal whose reply
        was delayed past it revives nothing).
        """
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return None
        return self.fence.extend(sent_mono)

    def pause_for_fence(self) -> None:
        """The delivery gate's call at the session's deadline (see :class:`DeliveryGate`)."""
        if self.fence.pauses and self.fence.remaining_seconds() <= 0:
            self._past_deadline()

    def resume_after_fence(self) -> None:
        """The delivery gate's call when the session renewed: deliver and read again."""
        passed = self._fenced_since
        if passed is None:
            return
        self._fenced_since = None
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return
        # Nothing was accepted in a span no deadline covered: what came in after the deadline
        # carries the time delivery resumed instead.
        self._waiting = _restamped(self._waiting, passed)
        if self._in_flight is None and self._waiting:
            self._submit_waiting()
        if not self._backpressure and self.end_reason is None:
            self._link.resume_reading()
        self._wake_settled()

    # --- the data path ---------------------------------------------------------------------

    def messages_received(self, messages: list[Frame]) -> None:
        """One read's messages (the connection's callback): sequence them, then deliver."""
        count = len(messages)
        self.progress.received += count
        sequencer = self._sequencer
        before = sequencer.last_seq
        records = sequencer.take(messages, time.time_ns() // 1_000_000)
        if len(records) != count or (records and records[-1].seq - before != count):
            self._count_irregular()  # skipped frames or a gap: rare, counted apart
        if not records:
            return
        self._metrics.incr(WorkerMetric.MESSAGES_RECEIVED, len(records))
        if (
            self._in_flight is None
            and not self._waiting
            and self._fenced_since is None
            and self.end_reason is None
        ):
            if self.fence.remaining_seconds() > 0:
                self._submit(records)
                return
            self._past_deadline()
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return
        self._waiting += records
        self._waiting_bytes += sum([len(r.payload) for r in records])
        if (
            len(self._waiting) >= MAX_WAITING_RECORDS or self._waiting_bytes >= MAX_WAITING_BYTES
        ) and not self._backpressure:
            self._backpressure = True
            self._link.pause_reading()

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
                stream_id=self.stream_id,
                seq=sequencer.last_seq,
                gaps=gaps,
                missing=missing,
            )

    def batch_stored(self, batch: SinkBatch) -> None:
        """The sink stored ``batch``: move the checkpoint, send what waited."""
        self._in_flight = None
        last = batch.records[-1]
        self.acked_seq = last.seq
        self.fence.checkpoint(last.seq)
        progress = self.progress
        progress.delivered += len(batch.records)
        progress.last_message_at_ms = last.received_at_ms
        progress.sink_failures = 0
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return
        if self._waiting:
            self._submit_waiting()
        self._wake_settled()

    def batch_failed(self, batch: SinkBatch, error: SinkError) -> None:
        """The sink did not store ``batch`` (wholly): what it did not store goes back to the
        front of the queue; past the deadline the fence decides, otherwise it is retried after
        a backoff (not after an end request)."""
        self._in_flight = None
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return
        unsent = batch.records if error.unsent is None else list(error.unsent)
        # Only what the sink did not store is sent again: a retry repeats nothing.
        self._waiting[:0] = [r for r in unsent if isinstance(r, SinkRecord)]
        if isinstance(error, SinkDeadlinePassed):
            self._past_deadline()
            self._wake_settled()
            return
        progress = self.progress
        progress.sink_failures += 1
        progress.sink_error = f"sink refused {progress.sink_failures} writes ({describe(error)})"
        self._metrics.incr(WorkerMetric.SINK_ERRORS)
        logger.warning(
            "sink write failed",
            stream_id=self.stream_id,
            epoch=self.epoch,
            attempt=progress.sink_failures,
            error=describe(error),
        )
        if self.end_reason is not None:
            self._wake_settled()  # ending: no more attempts
            return
        pause = rules.backoff_seconds(
            min(progress.sink_failures - 1, 10),
            SINK_RETRY_BASE_SECONDS,
            SINK_RETRY_MAX_SECONDS,
            random.random(),
        )
        self._retry_timer = asyncio.get_running_loop().call_later(pause, self._retry_sink)

    def _retry_sink(self) -> None:
        self._retry_timer = None
        if self._in_flight is None and self._waiting and self.end_reason is None:
            self._submit_waiting()

    def _submit_waiting(self) -> None:
        if self._retry_timer is not None or self._fenced_since is not None:
            return
        if self.fence.remaining_seconds() <= 0:
            self._past_deadline()
            return
        records, self._waiting = self._waiting, []
        self._waiting_bytes = 0
        self._submit(records)
        if self._backpressure:
            self._backpressure = False
            if self._fenced_since is None and self.end_reason is None:
                self._link.resume_reading()

    def _submit(self, records: list[SinkRecord]) -> None:
        batch = SinkBatch(self.header, records, self.fence, self)
        self._in_flight = batch
        try:
            self._sink.submit(batch)
        except SinkError as exc:  # the sink is closed (shutdown past its drain)
            self.batch_failed(batch, exc)

    def _past_deadline(self) -> None:
        """No delivery now: a per-stream lease ends (FENCED); a session's stream stops reading
        and waits in the gate for a renewal."""
        if not self.fence.pauses:
            self.request_end(EndReason.FENCED)
            return
        if self._fenced_since is None:
            self._fenced_since = self.fence.deadline_mono
            self._link.pause_reading()
            self._ctx.gate.hold(self)

    def _resume_from(self) -> int:
        """The seq a reconnect resumes after: the last one taken in (those still waiting or in
        the sink are this holder's to deliver)."""
        return self._sequencer.last_seq

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Hold the stream until it ends, then take the last steps its end reason calls for.

        Graceful (stopped, shed, shutdown, ended, failed): stop reading, let the sink take what
        was received, close the upstream (1000 or 1001), release with the final checkpoint
        (the last acknowledged seq) and progress, then hand off. Abrupt (lost, fenced): deliver
        nothing more, record the event, close the upstream.
        """
        self._task = asyncio.current_task()
        self._arm_deadline()
        self._ctx.connections.track(self.lease, self.progress, self._lost)
        try:
            if self._failure is not None:
                self.request_end(EndReason.FAILED)
            await self._hold()
            reason = self.end_reason
            if reason in GRACEFUL:
                await self._drain()
                code = 1000 if reason in (EndReason.STOPPED, EndReason.ENDED) else 1001
                await self._link.close(code)
                await self._give_back()
            else:
                self._record_abrupt_end()
                await self._link.close(1001)
                if reason is EndReason.FENCED:
                    await self._release_lapsed()
        except Exception as exc:  # a bug must not take the worker down
            logger.exception(
                "holder failed", stream_id=self.stream_id, epoch=self.epoch, error=describe(exc)
            )
            self.fence.stop_renewing()
            await self._link.close(1001)
            await self._release_lapsed()  # conditional on owner and epoch: safe in any state
        finally:
            for timer in (self._deadline_timer, self._retry_timer):
                if timer is not None:
                    timer.cancel()
            self._ctx.gate.forget(self)
            self._ctx.connections.forget(self.stream_id, self.epoch)
            self.fence.finish()

    async def _hold(self) -> None:
        """Keep the upstream link up until an end is requested or the upstream ends it."""
        link = self._link
        try:
            await self._interruptibly(link.run())
        except Exception as exc:
            self.request_end(EndReason.FAILED, describe(exc))
            return
        if link.upstream_ended:
            self.request_end(EndReason.ENDED, link.end_reason or "upstream ended the stream")

    async def _drain(self) -> None:
        """Graceful end: let the sink take what was received (one more batch after the one in
        it, no retries), within :data:`DRAIN_SECONDS` and the deadline."""
        if self._in_flight is None and self._waiting and self._retry_timer is None:
            self._submit_waiting()
        if self._in_flight is None:
            return
        settled = self._settled = asyncio.Event()
        limit = min(DRAIN_SECONDS, max(0.0, self.fence.remaining_seconds()) + 1.0)
        try:
            async with asyncio.timeout(limit):
                await settled.wait()
        except TimeoutError:
            return
        finally:
            self._settled = None

    def _wake_settled(self) -> None:
        settled = self._settled
        if settled is not None and self._in_flight is None:
            settled.set()

    def _lost(self) -> None:
        self.request_end(EndReason.LOST)

    def _on_event(self, event: UpstreamEvent) -> None:
        """The link's report: count, log, and note connection-state changes."""
        kind = event.kind
        stream_id = self.stream_id
        if kind is UpstreamEventKind.CONNECTED:
            logger.info("upstream connected", stream_id=stream_id, attempt=event.attempt)
        else:
            if kind is UpstreamEventKind.RETRYING:
                self._metrics.incr(WorkerMetric.RECONNECTS)
            logger.info(
                "upstream failed",
                stream_id=stream_id,
                kind=kind.value,
                error=event.error,
                status=event.status,
                close_code=event.close_code,
                retry_in_seconds=round(event.delay_seconds, 3),
            )
        state = _LINK_STATES.get(kind)
        if state is not None:
            error = None if state is ConnectionState.CONNECTED else event.error
            self._ctx.connections.note(self.lease, state, error, self._lost)

    async def _interruptibly(self, step: Coroutine[Any, Any, _T]) -> _T | None:
        """Await ``step`` unless an end request interrupts it first (then None).

        The interruption is a cancellation of this very task that :meth:`request_end` sends
        only while a step is in progress, and that is taken back here; a cancellation from
        anyone else (the worker giving up at the end of its shutdown budget) goes on.
        """
        if self.end_reason is not None:
            step.close()
            return None
        self._interrupting = False
        task = self._task
        assert task is not None
        self._interruptible = True
        try:
            result = await step
        except asyncio.CancelledError:
            if self._interrupting and task.cancelling() == 1:
                task.uncancel()
                return None
            raise
        finally:
            self._interruptible = False
        if self._interrupting:  # the step swallowed the interruption: take it back all the same
            task.uncancel()
            return None
        return result

    def _interrupt(self) -> None:
        task = self._task
        if (
            self._interruptible
            and not self._interrupting
            and task is not None
            and asyncio.current_task() is not task  # from inside the step: it is ending anyway
        ):
            self._interrupting = True
            task.cancel()

    def _arm_deadline(self) -> None:
        """Per-stream leases: a timer requests FENCED when the deadline passes unrenewed."""
        if self.fence.pauses:
            return
        loop = asyncio.get_running_loop()
        # time.monotonic and the loop's clock are the same clock on Linux (CLOCK_MONOTONIC).
        self._deadline_timer = loop.call_at(
            loop.time() + (self.deadline_mono - time.monotonic()), self._deadline_passed
        )

    def _deadline_passed(self) -> None:
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return
        if rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono):
            self._arm_deadline()  # renewed meanwhile: wait for the new deadline
            return
        self.request_end(EndReason.FENCED)

    def _record_abrupt_end(self) -> None:
        """The holder delivers nothing more: count it, log it, and write the lease event."""
        self.fence.stop_renewing()
        self._ctx.metrics.incr(WorkerMetric.LEASES_LOST)
        if self.end_reason is EndReason.FENCED:
            self._record(LeaseEventKind.FENCED, deadline_mono=self.deadline_mono)
            logger.warning("lease fenced", stream_id=self.stream_id, epoch=self.epoch)
        else:
            self._record(LeaseEventKind.LOST)
            logger.warning("lease lost", stream_id=self.stream_id, epoch=self.epoch)

    def _record(self, kind: LeaseEventKind, *, deadline_mono: float | None = None) -> None:
        self._ctx.events.record(
            kind, self.stream_id, self.epoch, deadline_mono=deadline_mono, worker_id=self.owner
        )

    # --- the last steps ------------------------------------------------------------------------

    async def _give_back(self) -> None:
        """Final checkpoint + release, then a handoff command if the stream is still wanted."""
        reason = self.end_reason
        assert reason is not None
        ctx = self._ctx
        self.fence.stop_renewing()
        if reason is EndReason.STOPPED:
            self._record(LeaseEventKind.STOPPED)
        stream = await self._release()
        if stream is None:
            return
        self._record(LeaseEventKind.RELEASED)
        if reason is EndReason.ENDED:
            ctx.metrics.incr(WorkerMetric.STREAMS_ENDED)
        logger.info(
            "lease released",
            stream_id=self.stream_id,
            epoch=self.epoch,
            reason=reason.value,
            last_seq=self.acked_seq,
        )
        # Still wanted (shed, drained, failed — or stopped and started again while this holder
        # was finishing): tell a worker now instead of leaving it to reconciliation.
        if not (self._settings.handoff_on_release and stream.desired_state is DesiredState.STARTED):
            return
        rebalance = reason is EndReason.SHED
        if await ctx.handoffs.send_handoff(self.stream_id, stream.generation, rebalance=rebalance):
            ctx.metrics.incr(WorkerMetric.HANDOFFS)
            self._record(LeaseEventKind.HANDOFF)

    async def _release(self) -> Stream | None:
        """Release with the final checkpoint and progress, retrying unanswered calls while it
        can matter.

        Returns the stream as it is after the release, or None when the lease was lost, the
        stream is gone, or the attempts ran out (the event is recorded here). A per-stream
        lease retries until its deadline; a session's stream while the session lives.
        """
        store = self._ctx.store
        while True:
            try:
                stream = await asyncio.to_thread(
                    store.release,
                    self.stream_id,
                    self.owner,
                    self.epoch,
                    last_seq=self.acked_seq,
                    last_error=self._failure,
                    stop=self.end_reason is EndReason.ENDED,
                    progress=self.progress.snapshot(),
                )
            except LeaseLost:
                self.end_reason = EndReason.LOST
                self._record_abrupt_end()
                return None
            except StoreError as exc:
                fence = self.fence
                if fence.gone or (
                    not fence.pauses
                    and time.monotonic() + RELEASE_RETRY_SECONDS >= self.deadline_mono
                ):
                    self.end_reason = EndReason.LOST if fence.gone else EndReason.FENCED
                    self._record_abrupt_end()
                    return None
                logger.info("release unanswered", stream_id=self.stream_id, error=describe(exc))
                await asyncio.sleep(RELEASE_RETRY_SECONDS)
                continue
            if stream is None:
                self._record(LeaseEventKind.LOST)
            return stream

    async def _release_lapsed(self) -> None:
        """After fencing (or a failure), free the lease if it is still ours, so a takeover
        need not wait.

        One attempt, short: the condition (owner and epoch) makes it safe whoever holds it now.
        The checkpoint written is the acknowledged seq, which is durable in the sink.
        """
        if self.fence.gone:
            return  # the session is lost: nothing more is written under it
        try:
            async with asyncio.timeout(BEST_EFFORT_RELEASE_SECONDS):
                await asyncio.to_thread(
                    self._ctx.store.release,
                    self.stream_id,
                    self.owner,
                    self.epoch,
                    last_seq=self.acked_seq,
                )
        except (LeaseLost, StoreError, TimeoutError):
            return


def _headers_for(profile: Profile, secrets: Secrets | None) -> HeadersSource | None:
    """What the link calls before each connect for the handshake headers."""
    if not profile.headers:
        return None
    if secrets is None:
        return lambda: _static_headers(profile)
    return lambda: secrets.headers(profile)


async def _static_headers(profile: Profile) -> list[tuple[str, str]]:
    """Headers without a secret resolver: literal values only."""
    if profile.secrets:
        raise UpstreamRejected("this worker cannot read secrets")
    return [(name, value.template) for name, value in profile.headers]


def _restamped(records: list[SinkRecord], deadline_mono: float) -> list[SinkRecord]:
    """Records taken in after ``deadline_mono`` carry the time delivery resumed instead: no
    message is accepted in a span no deadline covered."""
    now_ms = time.time_ns() // 1_000_000
    passed_ms = now_ms - int((time.monotonic() - deadline_mono) * 1000)
    return [
        r if r.received_at_ms < passed_ms else r._replace(received_at_ms=now_ms) for r in records
    ]
