"""One held stream: its lease, its upstream connection, a bounded queue and the sink.

A :class:`StreamHolder` is created by :mod:`worker.acquisition` after a won acquire and runs as
one task in the worker's stream TaskGroup until its lease ends. Inside it:

- *receive* (:class:`~worker.upstream_feed.UpstreamFeed`): upstream messages (resuming at
  ``last_seq + 1``) into a bounded queue, so a slow sink slows reading instead of growing memory;
- *deliver*: batches from the queue into the sink, each batch only while the holder is inside its
  self-fencing deadline (its :class:`~worker.fence.Fence`: the lease's own, or its session's);
  ``acked_seq`` — the checkpoint renewals carry — moves only after the sink acknowledged a whole
  batch;
- *report* (the feed too): connection-state changes, with failures as ``last_error``
  (rate-limited);
- *watch*: waits for an end request or, for a per-stream lease, the fencing deadline.

Past a per-stream lease's deadline the holding ends (FENCED). Past a session's deadline delivery
*pauses* — the queue fills, reading slows — until the session renews (resume) or is lost.

How it ends (:class:`EndReason`) decides the order of the last steps; see :meth:`run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from enum import StrEnum
from typing import Final

from streamlease import rules
from streamlease.errors import LeaseLost, SinkDeadlinePassed, SinkError, StoreError
from streamlease.model import Lease, Stream
from streamlease.schema import DesiredState
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fence import Fence
from worker.lease_events import LeaseEvent
from worker.logs import describe, logger
from worker.sinks import SinkRecord
from worker.upstream import CLOSE_TIMEOUT_SECONDS, UpstreamMessage
from worker.upstream_feed import UpstreamFeed

MAX_BATCH_RECORDS: Final = 500
"""Most records handed to the sink in one write."""
SINK_RETRY_BASE_SECONDS: Final = 0.1
SINK_RETRY_MAX_SECONDS: Final = 2.0
RELEASE_RETRY_SECONDS: Final = 0.2
"""Pause between release attempts that got no answer (per-stream leases: until the fencing
deadline; sessions: while the session lives)."""
BEST_EFFORT_RELEASE_SECONDS: Final = 2.0
"""How long a fenced holder tries to release its lapsed lease before giving up."""


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
    lease, its deadline)."""

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
        self._ctx = ctx
        self._settings = ctx.settings
        self._ended = asyncio.Event()
        self._queue: asyncio.Queue[UpstreamMessage | None] = asyncio.Queue(
            ctx.settings.receive_queue_size
        )
        self._stop_delivering = False
        self._halted = asyncio.Event()
        self._draining = False
        self._failure: str | None = None
        self._feed = UpstreamFeed(
            lease,
            ctx,
            self._queue,
            on_failed=lambda detail: self.request_end(EndReason.FAILED, detail),
            on_lost=lambda: self.request_end(EndReason.LOST),
            on_ended=lambda detail: self.request_end(EndReason.ENDED, detail),
            fenced=self._past_deadline if fence.pauses else None,
            until_renewed=self._wait_until_renewed if fence.pauses else None,
        )

    # --- what other tasks call -----------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """True until an end was requested."""
        return self.end_reason is None

    @property
    def deadline_mono(self) -> float:
        """Until when this holder may deliver (monotonic seconds)."""
        return self.fence.deadline_mono

    def request_end(self, reason: EndReason, detail: str | None = None) -> None:
        """Ask the holder to end for ``reason`` (see :data:`_PRIORITY` for concurrent asks)."""
        current = self.end_reason
        if current is not None and _PRIORITY[reason] <= _PRIORITY[current]:
            return
        self.end_reason = reason
        if reason in (EndReason.FAILED, EndReason.ENDED) and detail:
            self._failure = detail
        if reason not in GRACEFUL:
            self._halt_delivery()
        self._ended.set()

    def extend(self, sent_mono: float) -> float | None:
        """A renewal of a per-stream lease sent at ``sent_mono`` succeeded: move the deadline.

        Returns the deadline now in force, or None when the holder no longer delivers (lost,
        fenced, or the answer came back after the deadline it would set: a renewal whose reply
        was delayed past it revives nothing).
        """
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return None
        return self.fence.extend(sent_mono)

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Hold the stream until it ends, then take the last steps its end reason calls for.

        Graceful (stopped, shed, shutdown, failed): stop reading, close the upstream, drain the
        queue into the sink within the deadline, release with the final checkpoint (the last
        acknowledged seq), then hand off. Abrupt (lost, fenced): stop delivering at once, record
        the event once no write is in flight, then close the upstream.
        """
        try:
            async with asyncio.TaskGroup() as tasks:
                receiver = tasks.create_task(self._feed.receive())
                deliverer = tasks.create_task(self._deliver())
                reporter = tasks.create_task(self._feed.report_connection())
                await self._watch()
                reporter.cancel()
                if self.end_reason in GRACEFUL:
                    await self._stop_gracefully(receiver, deliverer)
                else:
                    await self._stop_abruptly(receiver, deliverer)
            if self.end_reason in GRACEFUL:
                await self._give_back()
            elif self.end_reason is EndReason.FENCED:
                await self._release_lapsed()
        except Exception as exc:  # a bug must not take the worker down
            logger.exception(
                "holder failed", stream_id=self.stream_id, epoch=self.epoch, error=describe(exc)
            )
            self._halt_delivery()
            self.fence.stop_renewing()
            await self._release_lapsed()  # conditional on owner and epoch: safe in any state
        finally:
            self.fence.finish()

    async def _watch(self) -> None:
        """Return once an end was requested; for a per-stream lease, request FENCED when the
        deadline passes first (a session's deadline only pauses delivery)."""
        if self.fence.pauses:
            await self._ended.wait()
            return
        while self.end_reason is None:
            remaining = self.deadline_mono - time.monotonic()
            if remaining <= 0:
                self.request_end(EndReason.FENCED)
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._ended.wait()

    async def _stop_gracefully(
        self, receiver: asyncio.Task[None], deliverer: asyncio.Task[None]
    ) -> None:
        receiver.cancel()
        code = 1000 if self.end_reason in (EndReason.STOPPED, EndReason.ENDED) else 1001
        await self._feed.close(code)
        self._draining = True
        self._wake_deliverer()
        # A session's holder waits for its queue even through a fencing pause (the session
        # renews, or is lost and halts delivery); a per-stream lease's holder only until its
        # own deadline.
        remaining = None if self.fence.pauses else max(0.0, self.deadline_mono - time.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                await asyncio.shield(deliverer)
        self._halt_delivery()
        await self._quiesce(deliverer)
        if self.end_reason not in GRACEFUL:  # fenced or lost while draining
            self._record_abrupt_end()

    async def _stop_abruptly(
        self, receiver: asyncio.Task[None], deliverer: asyncio.Task[None]
    ) -> None:
        self._halt_delivery()
        receiver.cancel()
        self.fence.stop_renewing()
        await self._quiesce(deliverer)
        self._record_abrupt_end()
        await self._feed.close(1001)

    def _record_abrupt_end(self) -> None:
        """The holder delivers nothing more: count it, log it, and write the lease event."""
        self.fence.stop_renewing()
        self._ctx.metrics.incr(WorkerMetric.LEASES_LOST)
        if self.end_reason is EndReason.FENCED:
            self._record(LeaseEvent.FENCED, deadline_mono=self.deadline_mono)
            logger.warning("lease fenced", stream_id=self.stream_id, epoch=self.epoch)
        else:
            self._record(LeaseEvent.LOST)
            logger.warning("lease lost", stream_id=self.stream_id, epoch=self.epoch)

    def _record(self, event: LeaseEvent, *, deadline_mono: float | None = None) -> None:
        self._ctx.events.record(
            event, self.stream_id, self.epoch, deadline_mono=deadline_mono, worker_id=self.owner
        )

    async def _quiesce(self, deliverer: asyncio.Task[None]) -> None:
        """Wait for a sink write in flight to finish (it cannot be recalled), then stop."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                await asyncio.shield(deliverer)
        if not deliverer.done():
            deliverer.cancel()
            logger.warning("sink write still in flight", stream_id=self.stream_id, epoch=self.epoch)

    # --- the last steps ------------------------------------------------------------------------

    async def _give_back(self) -> None:
        """Final checkpoint + release, then a handoff command if the stream is still wanted."""
        reason = self.end_reason
        assert reason is not None
        ctx = self._ctx
        self.fence.stop_renewing()
        if reason is EndReason.STOPPED:
            self._record(LeaseEvent.STOPPED)
        stream = await self._release()
        if stream is None:
            return
        self._record(LeaseEvent.RELEASED)
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
            self._record(LeaseEvent.HANDOFF)

    async def _release(self) -> Stream | None:
        """Release with the final checkpoint, retrying unanswered calls while it can matter.

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
                self._record(LeaseEvent.LOST)
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

    # --- deliver -------------------------------------------------------------------------------

    def _halt_delivery(self) -> None:
        self._stop_delivering = True
        self._halted.set()
        self._wake_deliverer()

    def _wake_deliverer(self) -> None:
        # The deliverer only waits on an empty queue, so a wake-up token always fits then.
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    async def _deliver(self) -> None:
        """Queue → sink in batches; ``acked_seq`` follows what the sink acknowledged."""
        queue = self._queue
        while True:
            if self._stop_delivering or (self._draining and queue.empty()):
                return
            first = await queue.get()
            if first is None:
                continue  # a wake-up: look at the flags again
            batch = [first]
            while len(batch) < MAX_BATCH_RECORDS and not queue.empty():
                item = queue.get_nowait()
                if item is not None:
                    batch.append(item)
            if not await self._write(batch):
                return

    async def _write(self, batch: list[UpstreamMessage]) -> bool:
        """Write one batch, retrying sink failures; False when delivery must stop instead.

        The fencing check comes before every attempt, and the sink gets the deadline too: past
        it nothing is sent, whatever DynamoDB would say. A per-stream lease then ends (FENCED);
        a session's holder waits for the session to renew and sends what was not stored. Only
        a batch stored whole moves ``acked_seq``.
        """
        ctx = self._ctx
        worker_id = self.owner
        unsent: list[SinkRecord] = [
            SinkRecord(
                self.stream_id,
                self.epoch,
                m.seq,
                m.received_at_ms,
                m.payload,
                worker_id,
                m.encoding,
            )
            for m in batch
        ]
        failures = 0
        while unsent:
            if self._stop_delivering or (self._draining and ctx.hurry.is_set()):
                return False
            if not rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono):
                if not self.fence.pauses:
                    self.request_end(EndReason.FENCED)
                    return False
                if not await self._wait_until_renewed():
                    return False
                continue
            try:
                await ctx.sink.write(unsent, self.fence)
            except Exception as exc:  # SinkError, or whatever a pluggable sink raises
                # Only what the sink did not store is sent again: a retry repeats nothing.
                if isinstance(exc, SinkError) and exc.unsent is not None:
                    unsent = [r for r in exc.unsent if isinstance(r, SinkRecord)]
                if isinstance(exc, SinkDeadlinePassed):
                    continue  # the fencing check above decides what now
                failures += 1
                ctx.metrics.incr(WorkerMetric.SINK_ERRORS)
                logger.warning(
                    "sink write failed",
                    stream_id=self.stream_id,
                    epoch=self.epoch,
                    attempt=failures,
                    error=describe(exc),
                )
                await asyncio.sleep(
                    rules.backoff_seconds(
                        min(failures - 1, 10),
                        SINK_RETRY_BASE_SECONDS,
                        SINK_RETRY_MAX_SECONDS,
                        random.random(),
                    )
                )
                continue
            unsent = []
        self.acked_seq = batch[-1].seq
        self.fence.checkpoint(self.acked_seq)
        return True

    def _past_deadline(self) -> bool:
        return not rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono)

    async def _wait_until_renewed(self) -> bool:
        """Paused past the session's deadline: wait for a renewal that moves it (True), or
        for the end of delivery or of the session (False)."""
        fence = self.fence
        while not rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono):
            if self._stop_delivering or fence.gone:
                return False
            renewed = asyncio.ensure_future(fence.wait_renewed(None))
            halted = asyncio.ensure_future(self._halted.wait())
            try:
                await asyncio.wait({renewed, halted}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                renewed.cancel()
                halted.cancel()
            if self._stop_delivering or (self._draining and self._ctx.hurry.is_set()):
                return False
        return True
