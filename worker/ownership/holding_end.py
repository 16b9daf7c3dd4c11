"""How a holding ends: its last steps (settle the sink, release with the final checkpoint, hand
off) and the lease events it records.

:class:`HoldingEnd` is a part of :class:`~worker.ownership.holder.StreamHolder`, which sets the
state declared here; no lease is given up while a batch of the holding may still be sent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from streamlease.errors import LeaseLost, StoreError
from streamlease.lease_events import LeaseEventKind
from streamlease.model import Stream
from streamlease.settings import Settings
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fencing.fence import Fence
from worker.logs import describe, logger
from worker.ownership.end_reason import EndReason
from worker.stream.delivery import Delivery
from worker.stream.progress import ProgressWatch

RELEASE_RETRY_SECONDS: Final = 0.2
"""Pause between release attempts that got no answer (per-stream leases: until the fencing
deadline; sessions: while the session lives)."""
BEST_EFFORT_RELEASE_SECONDS: Final = 2.0
"""How long a fenced holder tries to release its lapsed lease before giving up."""


class HoldingEnd:
    """The last steps of a :class:`~worker.ownership.holder.StreamHolder`, and its lease events."""

    __slots__ = ("end_reason",)  # the one attribute the last steps write

    stream_id: str
    epoch: int
    owner: str
    fence: Fence
    delivery: Delivery
    progress: ProgressWatch
    _ctx: WorkerContext
    _settings: Settings
    _failure: str | None
    end_reason: EndReason | None

    @property
    def deadline_mono(self) -> float:
        """Until when this holder may deliver (monotonic seconds)."""
        return self.fence.deadline_mono

    @property
    def acked_seq(self) -> int:
        """Highest seq the sink acknowledged: the checkpoint renewals and the release carry."""
        return self.delivery.acked_seq

    def _record_abrupt_end(self, delivered_until_mono: float | None = None) -> None:
        """The holder delivers nothing more: count it, log it, and write the lease event.
        ``delivered_until_mono``: when it had already stopped delivering (a release found the
        lease gone: it was sent after the last delivery, and may have landed long before its
        answer was lost), so the event does not stretch the holding to the moment it learned."""
        self.fence.stop_renewing()
        self._ctx.metrics.incr(WorkerMetric.LEASES_LOST)
        if self.end_reason is EndReason.FENCED:
            deadline = self.deadline_mono
            if delivered_until_mono is not None:
                deadline = min(deadline, delivered_until_mono)
            self._record(LeaseEventKind.FENCED, deadline_mono=deadline)
            logger.warning("lease fenced", stream_id=self.stream_id, epoch=self.epoch)
        else:
            self._record(LeaseEventKind.LOST, deadline_mono=delivered_until_mono)
            logger.warning("lease lost", stream_id=self.stream_id, epoch=self.epoch)

    def _record(self, kind: LeaseEventKind, *, deadline_mono: float | None = None) -> None:
        self._ctx.events.record(
            kind, self.stream_id, self.epoch, deadline_mono=deadline_mono, worker_id=self.owner
        )

    # --- the last steps ------------------------------------------------------------------------

    async def _settle_sink(self) -> None:
        """Before the lease is given up: nothing more of this holding may reach the sink. Its
        batch still there is closed to every send not begun, and waited for at most the fence
        margin, which covers a send begun before (architecture §4, "Fencing")."""
        if not await self.delivery.settle(self._settings.fence_margin_seconds):
            logger.warning(
                "sink batch unsettled at release", stream_id=self.stream_id, epoch=self.epoch
            )

    async def _give_back(self) -> None:
        """Final checkpoint + release, then a handoff command if the stream is still wanted."""
        reason = self.end_reason
        assert reason is not None
        ctx = self._ctx
        self.fence.stop_renewing()
        if reason is EndReason.STOPPED:
            self._record(LeaseEventKind.STOPPED)
        delivered_until = time.monotonic()  # the holding delivers nothing from here on
        stream = await self._release(delivered_until)
        if stream is None:
            return
        # Ended when the release was sent: a retried one may learn it landed only after another
        # worker has acquired the stream.
        self._record(LeaseEventKind.RELEASED, deadline_mono=delivered_until)
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
        if not (self._settings.handoff_on_release and stream.awaits_a_holder):
            return
        rebalance = reason is EndReason.SHED
        if await ctx.handoffs.send_handoff(self.stream_id, stream.generation, rebalance=rebalance):
            ctx.metrics.incr(WorkerMetric.HANDOFFS)
            self._record(LeaseEventKind.HANDOFF)

    async def _release(self, delivered_until: float) -> Stream | None:
        """Release with the final checkpoint and progress, retrying unanswered calls while it
        can matter. ``delivered_until``: when the holding stopped delivering (monotonic).

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
                self._record_abrupt_end(delivered_until)
                return None
            except StoreError as exc:
                fence = self.fence
                if fence.gone or (
                    not fence.pauses
                    and time.monotonic() + RELEASE_RETRY_SECONDS >= self.deadline_mono
                ):
                    self.end_reason = EndReason.LOST if fence.gone else EndReason.FENCED
                    self._record_abrupt_end(delivered_until)
                    return None
                logger.info("release unanswered", stream_id=self.stream_id, error=describe(exc))
                await asyncio.sleep(RELEASE_RETRY_SECONDS)
                continue
            if stream is None:
                self._record(LeaseEventKind.LOST, deadline_mono=delivered_until)
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
