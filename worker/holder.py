"""One held stream: its lease, its upstream connection and the sink, in one task.

A :class:`StreamHolder` is created by :mod:`worker.acquisition` after a won acquire and runs as
one task in the worker's stream TaskGroup until its lease ends. The task reads a batch of
messages (:class:`~worker.upstream_feed.UpstreamFeed`: resuming at ``last_seq + 1``, the
batch being what has arrived by the time it looks), writes it to the sink while the holder is
inside its self-fencing deadline (its :class:`~worker.fence.Fence`: the lease's own, or its
session's), moves ``acked_seq`` — the checkpoint renewals carry — once the sink acknowledged
the whole batch, and reads again. Nothing is read while a write is in flight, so a slow sink
slows reading (websockets' bounded buffer, then TCP) instead of growing memory, and no message
passes through a second task or queue.

Past a per-stream lease's deadline (a timer) the holding ends (FENCED). Past a session's
deadline the task *pauses* before its next write — reading stops — until the session renews
(resume) or is lost. An end request from another task (stop, shed, shutdown, lost) interrupts a
pending read or pause at once; a sink write in flight is never interrupted (it cannot be
recalled) and is followed by nothing. Connection-state changes go to the worker's
:class:`~worker.connection_report.ConnectionReport`.

How it ends (:class:`EndReason`) decides the order of the last steps; see :meth:`run`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine
from enum import StrEnum
from typing import Any, Final, TypeVar

from streamlease import rules
from streamlease.errors import LeaseLost, SinkDeadlinePassed, SinkError, StoreError
from streamlease.lease_events import LeaseEventKind
from streamlease.model import Lease, Stream
from streamlease.schema import DesiredState
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fence import Fence
from worker.logs import describe, logger
from worker.sinks import SinkRecord
from worker.tracing import UNTRACED
from worker.upstream import UpstreamMessage
from worker.upstream_feed import UpstreamFeed

_T = TypeVar("_T")

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
        self.trace = UNTRACED
        """This start's place in a trace (set by the acquire): connect and first batch."""
        self._ctx = ctx
        self._settings = ctx.settings
        self._failure: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._interruptible = False
        self._interrupting = False
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._feed = UpstreamFeed(
            lease,
            ctx,
            on_failed=lambda detail: self.request_end(EndReason.FAILED, detail),
            on_lost=lambda: self.request_end(EndReason.LOST),
            on_ended=lambda detail: self.request_end(EndReason.ENDED, detail),
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
        """Ask the holder to end for ``reason`` (see :data:`_PRIORITY` for concurrent asks):
        a read or pause in progress is interrupted now, a sink write in flight finishes."""
        current = self.end_reason
        if current is not None and _PRIORITY[reason] <= _PRIORITY[current]:
            return
        self.end_reason = reason
        if reason in (EndReason.FAILED, EndReason.ENDED) and detail:
            self._failure = detail
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

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Hold the stream until it ends, then take the last steps its end reason calls for.

        Graceful (stopped, shed, shutdown, ended, failed): stop reading, close the upstream
        (1000 or 1001), release with the final checkpoint (the last acknowledged seq), then hand
        off. Abrupt (lost, fenced): deliver nothing more, record the event, close the upstream.
        """
        self._task = asyncio.current_task()
        self._arm_deadline()
        try:
            await self._hold()
            reason = self.end_reason
            if reason in GRACEFUL:
                code = 1000 if reason in (EndReason.STOPPED, EndReason.ENDED) else 1001
                await self._feed.close(code)
                await self._give_back()
            else:
                self._record_abrupt_end()
                await self._feed.close(1001)
                if reason is EndReason.FENCED:
                    await self._release_lapsed()
        except Exception as exc:  # a bug must not take the worker down
            logger.exception(
                "holder failed", stream_id=self.stream_id, epoch=self.epoch, error=describe(exc)
            )
            self.fence.stop_renewing()
            await self._feed.close(1001)
            await self._release_lapsed()  # conditional on owner and epoch: safe in any state
        finally:
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
            self._ctx.connections.forget(self.stream_id, self.epoch)
            self.fence.finish()

    async def _hold(self) -> None:
        """Read → write → acknowledge until an end is requested."""
        feed = self._feed
        while self.end_reason is None:
            batch = await self._interruptibly(feed.next_batch(MAX_BATCH_RECORDS))
            if not batch:
                return  # interrupted, ended by the upstream, or the feed failed
            if not await self._write(batch):
                return

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
        except LeaseLost:
            return
        except (StoreError, TimeoutError):
            self.fence.release_unanswered()  # the item may still name this holding

    # --- deliver -------------------------------------------------------------------------------

    async def _write(self, batch: list[UpstreamMessage]) -> bool:
        """Write one batch, retrying sink failures; False when delivery must stop instead.

        The fencing check comes before every attempt, and the sink gets the deadline too: past
        it nothing is sent, whatever DynamoDB would say. A per-stream lease then ends (FENCED);
        a session's holder pauses until the session renews and then sends what was not stored
        (messages taken in after the deadline are stamped as taken in then). Only a batch
        stored whole moves ``acked_seq``.
        """
        ctx = self._ctx
        owner, stream_id, epoch = self.owner, self.stream_id, self.epoch
        unsent: list[SinkRecord] = [
            SinkRecord(stream_id, epoch, m.seq, m.received_at_ms, m.payload, owner, m.encoding)
            for m in batch
        ]
        failures = 0
        while unsent:
            if self.end_reason is not None and self.end_reason not in GRACEFUL:
                return False
            if not rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono):
                if not self.fence.pauses:
                    self.request_end(EndReason.FENCED)
                    return False
                passed = self.deadline_mono
                if not await self._interruptibly(self._until_renewed()):
                    return False
                unsent = _restamped(unsent, passed)
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
                    stream_id=stream_id,
                    epoch=epoch,
                    attempt=failures,
                    error=describe(exc),
                )
                pause = rules.backoff_seconds(
                    min(failures - 1, 10),
                    SINK_RETRY_BASE_SECONDS,
                    SINK_RETRY_MAX_SECONDS,
                    random.random(),
                )
                if await self._interruptibly(asyncio.sleep(pause, result=True)) is None:
                    return False
                continue
            unsent = []
        self.acked_seq = batch[-1].seq
        self.fence.checkpoint(self.acked_seq)
        self.trace.first_batch(len(batch))
        return True

    async def _until_renewed(self) -> bool:
        """Paused past the session's deadline: True once a renewal moved it, False when the
        session is gone."""
        fence = self.fence
        while not rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono):
            if fence.gone:
                return False
            await fence.wait_renewed(None)
        return True


def _restamped(records: list[SinkRecord], deadline_mono: float) -> list[SinkRecord]:
    """Records taken in after ``deadline_mono`` carry the time delivery resumed instead: no
    message is accepted in a span no deadline covered."""
    now_ms = time.time_ns() // 1_000_000
    passed_ms = now_ms - int((time.monotonic() - deadline_mono) * 1000)
    return [
        r if r.received_at_ms < passed_ms else r._replace(received_at_ms=now_ms) for r in records
    ]
