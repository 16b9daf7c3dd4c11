"""One held stream: its lease, its upstream connection, a bounded queue and the sink.

A :class:`StreamHolder` is created by :mod:`worker.acquisition` after a won acquire and runs as
one task in the worker's stream TaskGroup until its lease ends. Inside it:

- *receive* (:class:`~worker.upstream_feed.UpstreamFeed`): upstream messages (resuming at
  ``last_seq + 1``) into a bounded queue, so a slow sink slows reading instead of growing memory;
- *deliver*: batches from the queue into the sink, each batch only while the holder is inside its
  self-fencing deadline; ``acked_seq`` — the checkpoint every renewal carries — moves only after
  the sink acknowledged a batch;
- *report* (the feed too): upstream failures into ``last_error`` (rate-limited);
- *watch*: waits for an end request or the fencing deadline, whichever comes first.

How it ends (:class:`EndReason`) decides the order of the last steps; see :meth:`run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from enum import StrEnum
from typing import Final, Protocol

from streamlease import rules
from streamlease.errors import LeaseLost, StoreError
from streamlease.model import Lease
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
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
"""Pause between release attempts that got no answer (until the fencing deadline)."""
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
    FAILED = "failed"
    """An unexpected error in the holder: release with ``last_error``, no handoff."""
    LOST = "lost"
    """DynamoDB says the lease is not ours: stop at once, write nothing more."""
    FENCED = "fenced"
    """The fencing deadline passed without a renewal: stop at once."""


GRACEFUL: Final = frozenset(
    {EndReason.STOPPED, EndReason.SHED, EndReason.SHUTDOWN, EndReason.FAILED}
)
HANDS_OFF: Final = frozenset({EndReason.SHED, EndReason.SHUTDOWN})
_PRIORITY: Final = {
    EndReason.SHED: 0,
    EndReason.SHUTDOWN: 1,
    EndReason.FAILED: 2,
    EndReason.STOPPED: 3,
    EndReason.FENCED: 4,
    EndReason.LOST: 4,
}
"""A later end request replaces an earlier one only with a higher priority: losing the lease
during a graceful drain stops the drain; a second abrupt reason changes nothing."""


class RenewalTracker(Protocol):
    """The renewal loop as a holder sees it."""

    def untrack(self, stream_id: str, epoch: int) -> None:
        """Stop renewing this lease."""
        ...


class StreamHolder:
    """Holds one stream under one lease epoch until :meth:`request_end` or its deadline."""

    def __init__(
        self,
        lease: Lease,
        ctx: WorkerContext,
        renewals: RenewalTracker,
        *,
        acquired_mono: float,
        deadline_mono: float,
    ) -> None:
        """``deadline_mono``: the fencing deadline given by the acquire (monotonic seconds)."""
        self.lease = lease
        self.stream_id = lease.stream_id
        self.epoch = lease.epoch
        self.acquired_mono = acquired_mono
        self.deadline_mono = deadline_mono
        self.acked_seq = lease.last_seq
        """Highest seq the sink acknowledged: the checkpoint renewals and the release carry."""
        self.end_reason: EndReason | None = None
        self._ctx = ctx
        self._renewals = renewals
        self._settings = ctx.settings
        self._ended = asyncio.Event()
        self._queue: asyncio.Queue[UpstreamMessage | None] = asyncio.Queue(
            ctx.settings.receive_queue_size
        )
        self._stop_delivering = False
        self._draining = False
        self._failure: str | None = None
        self._feed = UpstreamFeed(
            lease,
            ctx,
            self._queue,
            on_failed=lambda detail: self.request_end(EndReason.FAILED, detail),
            on_lost=lambda: self.request_end(EndReason.LOST),
        )

    # --- what other tasks call -----------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """True until an end was requested."""
        return self.end_reason is None

    def request_end(self, reason: EndReason, detail: str | None = None) -> None:
        """Ask the holder to end for ``reason`` (see :data:`_PRIORITY` for concurrent asks)."""
        current = self.end_reason
        if current is not None and _PRIORITY[reason] <= _PRIORITY[current]:
            return
        self.end_reason = reason
        if reason is EndReason.FAILED and detail:
            self._failure = detail
        if reason not in GRACEFUL:
            self._halt_delivery()
        self._ended.set()

    def extend(self, sent_mono: float) -> float | None:
        """A renewal sent at ``sent_mono`` succeeded: move the fencing deadline.

        Returns the deadline now in force, or None when the holder no longer delivers (lost,
        fenced, or the answer came back after the deadline it would set: a renewal whose reply
        was delayed past it revives nothing).
        """
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return None
        deadline = rules.fence_deadline_mono(
            sent_mono, self._settings.lease_seconds, self._settings.fence_margin_seconds
        )
        if not rules.is_safe_to_deliver(time.monotonic(), deadline):
            return None
        self.deadline_mono = max(self.deadline_mono, deadline)
        return self.deadline_mono

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
                reporter = tasks.create_task(self._feed.report_errors())
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
            self._renewals.untrack(self.stream_id, self.epoch)
            await self._release_lapsed()  # conditional on owner and epoch: safe in any state
        finally:
            self._renewals.untrack(self.stream_id, self.epoch)

    async def _watch(self) -> None:
        """Return once an end was requested; request FENCED when the deadline passes first."""
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
        code = 1000 if self.end_reason is EndReason.STOPPED else 1001
        await self._feed.close(code)
        self._draining = True
        self._wake_deliverer()
        remaining = self.deadline_mono - time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, remaining)):
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
        self._renewals.untrack(self.stream_id, self.epoch)
        await self._quiesce(deliverer)
        self._record_abrupt_end()
        await self._feed.close(1001)

    def _record_abrupt_end(self) -> None:
        """The holder delivers nothing more: count it, log it, and write the lease event."""
        self._renewals.untrack(self.stream_id, self.epoch)
        self._ctx.metrics.incr(WorkerMetric.LEASES_LOST)
        if self.end_reason is EndReason.FENCED:
            self._ctx.events.record(
                LeaseEvent.FENCED, self.stream_id, self.epoch, deadline_mono=self.deadline_mono
            )
            logger.warning("lease fenced", stream_id=self.stream_id, epoch=self.epoch)
        else:
            self._ctx.events.record(LeaseEvent.LOST, self.stream_id, self.epoch)
            logger.warning("lease lost", stream_id=self.stream_id, epoch=self.epoch)

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
        """Final checkpoint + release, then (shed, shutdown) a handoff command."""
        reason = self.end_reason
        assert reason is not None
        ctx = self._ctx
        self._renewals.untrack(self.stream_id, self.epoch)
        if reason is EndReason.STOPPED:
            ctx.events.record(LeaseEvent.STOPPED, self.stream_id, self.epoch)
        released = await self._release()
        if released is None:
            return
        ctx.events.record(LeaseEvent.RELEASED, self.stream_id, self.epoch)
        logger.info(
            "lease released",
            stream_id=self.stream_id,
            epoch=self.epoch,
            reason=reason.value,
            last_seq=self.acked_seq,
        )
        if not (reason in HANDS_OFF and self._settings.handoff_on_release and released):
            return
        if await ctx.handoffs.send_handoff(self.stream_id, self.lease.generation):
            ctx.metrics.incr(WorkerMetric.HANDOFFS)
            ctx.events.record(LeaseEvent.HANDOFF, self.stream_id, self.epoch)

    async def _release(self) -> bool | None:
        """Release with the final checkpoint, retrying unanswered calls until the deadline.

        Returns what the store said (True released now, False already released), or None when
        the lease was lost or the deadline passed first (the event is recorded here).
        """
        store = self._ctx.store
        while True:
            try:
                return await asyncio.to_thread(
                    store.release,
                    self.stream_id,
                    self._ctx.worker_id,
                    self.epoch,
                    last_seq=self.acked_seq,
                    last_error=self._failure,
                )
            except LeaseLost:
                self.end_reason = EndReason.LOST
                self._record_abrupt_end()
                return None
            except StoreError as exc:
                if time.monotonic() + RELEASE_RETRY_SECONDS >= self.deadline_mono:
                    self.end_reason = EndReason.FENCED
                    self._record_abrupt_end()
                    return None
                logger.info("release unanswered", stream_id=self.stream_id, error=describe(exc))
                await asyncio.sleep(RELEASE_RETRY_SECONDS)

    async def _release_lapsed(self) -> None:
        """After fencing (or a failure), free the lease if it is still ours, so a takeover
        need not wait.

        One attempt, short: the condition (owner and epoch) makes it safe whoever holds it now.
        The checkpoint written is the acknowledged seq, which is durable in the sink.
        """
        try:
            async with asyncio.timeout(BEST_EFFORT_RELEASE_SECONDS):
                await asyncio.to_thread(
                    self._ctx.store.release,
                    self.stream_id,
                    self._ctx.worker_id,
                    self.epoch,
                    last_seq=self.acked_seq,
                )
        except (LeaseLost, StoreError, TimeoutError):
            return

    # --- deliver -------------------------------------------------------------------------------

    def _halt_delivery(self) -> None:
        self._stop_delivering = True
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

        The fencing check comes before every attempt: past the deadline nothing is written,
        whatever DynamoDB would say.
        """
        ctx = self._ctx
        worker_id = ctx.worker_id
        records = [
            SinkRecord(self.stream_id, self.epoch, m.seq, m.received_at_ms, m.payload, worker_id)
            for m in batch
        ]
        failures = 0
        while True:
            if self._stop_delivering or (self._draining and ctx.hurry.is_set()):
                return False
            if not rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono):
                self.request_end(EndReason.FENCED)
                return False
            try:
                await ctx.sink.write(records)
            except Exception as exc:  # SinkError, or whatever a pluggable sink raises
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
            self.acked_seq = batch[-1].seq
            return True
