"""Taking a stream: one conditional acquire, then a holder with its fencing deadline.

Every path that takes streams (SQS commands, the reconciler's orphans, scheduled takeovers of
suspects) comes through :meth:`Acquirer.try_acquire`, so capacity, shutdown and the lease event
log are handled in one place.
"""

from __future__ import annotations

import asyncio
import time
from enum import StrEnum

from streamlease import rules
from streamlease.errors import LeaseConflict
from streamlease.lease_store import wall_ms
from streamlease.model import Lease
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.holder import EndReason, StreamHolder
from worker.holdings import Holdings
from worker.lease_events import LeaseEvent
from worker.logs import describe, logger
from worker.renewal import Renewals


class Outcome(StrEnum):
    """How an acquire attempt ended."""

    WON = "won"
    HELD = "held"
    """This worker holds (or is acquiring) it already."""
    NO_ROOM = "no_room"
    """At capacity or shutting down: nothing was tried."""
    OWNED = "owned"
    STOPPED = "stopped"
    MISSING = "missing"
    UNANSWERED = "unanswered"
    """DynamoDB did not answer (it may be worth trying again later)."""

    @property
    def decided(self) -> bool:
        """True when the attempt settled the stream's fate for now (a command can be deleted)."""
        return self not in (Outcome.NO_ROOM, Outcome.UNANSWERED)


_CONFLICTS = {"owned": Outcome.OWNED, "stopped": Outcome.STOPPED, "missing": Outcome.MISSING}


class Acquirer:
    """Acquires streams for this worker and starts their holders."""

    def __init__(self, ctx: WorkerContext, holdings: Holdings, renewals: Renewals) -> None:
        self._ctx = ctx
        self._holdings = holdings
        self._renewals = renewals
        self._was_behind = False

    def may_acquire(self) -> bool:
        """Whether this worker takes streams at all now: not shutting down, and its renewals
        keep up (see :meth:`Renewals.is_behind`). Logs when the latter changes."""
        if self._ctx.shutdown_requested.is_set():
            return False
        behind = self._renewals.is_behind()
        if behind != self._was_behind:
            self._was_behind = behind
            if behind:
                logger.warning(
                    "renewals behind, taking no streams",
                    behind_seconds=round(self._renewals.behind_seconds(), 3),
                )
            else:
                logger.info("renewals caught up, taking streams again")
        return not behind

    async def try_acquire(self, stream_id: str, *, source: str) -> Outcome:
        """Try to take ``stream_id``; ``source`` (command, orphan, takeover) is for logs only.

        Never raises for a DynamoDB failure (``UNANSWERED``).
        """
        ctx = self._ctx
        if ctx.shutdown_requested.is_set():
            return Outcome.NO_ROOM
        if stream_id in self._holdings:
            return Outcome.HELD
        if not self.may_acquire():
            return Outcome.NO_ROOM
        if not self._holdings.reserve(stream_id):
            return Outcome.NO_ROOM
        try:
            lease, deadline = await self._acquire_fresh(stream_id)
        except LeaseConflict as conflict:
            self._holdings.cancel_reservation(stream_id)
            return _CONFLICTS.get(conflict.reason, Outcome.OWNED)
        except Exception as exc:  # StoreError or a bug: the stream stays for someone else
            self._holdings.cancel_reservation(stream_id)
            logger.info("acquire unanswered", stream_id=stream_id, error=describe(exc))
            return Outcome.UNANSWERED
        except asyncio.CancelledError:
            self._holdings.cancel_reservation(stream_id)
            raise
        self._start(lease, deadline, source)
        return Outcome.WON

    async def _acquire_fresh(self, stream_id: str) -> tuple[Lease, float]:
        """Acquire; returns the lease and its fencing deadline (monotonic seconds).

        The deadline counts from the moment the call was *sent*: DynamoDB wrote an expiry of
        at least send time + lease. Should the store ever hand back a lease whose expiry is
        shorter than that (an earlier write), the deadline follows the stored expiry instead.
        """
        ctx = self._ctx
        settings = ctx.settings
        sent_mono, sent_wall = time.monotonic(), wall_ms()
        call = asyncio.ensure_future(
            asyncio.to_thread(ctx.store.acquire, stream_id, ctx.worker_id, settings.lease_ms)
        )
        try:
            lease = await asyncio.shield(call)
        except asyncio.CancelledError:
            await self._give_back_late(call)
            raise
        granted_seconds = min(settings.lease_seconds, (lease.expires_at_ms - sent_wall) / 1000.0)
        deadline = rules.fence_deadline_mono(
            sent_mono, granted_seconds, settings.fence_margin_seconds
        )
        return lease, deadline

    async def _give_back_late(self, call: asyncio.Future[Lease]) -> None:
        """The caller was cancelled (shutdown) while its acquire was in flight: if the acquire
        won after all, release that lease at once rather than leave it unheld for a lease."""
        try:
            async with asyncio.timeout(self._ctx.settings.dynamodb_timeout_seconds * 3):
                lease = await call
            await asyncio.to_thread(
                self._ctx.store.release, lease.stream_id, self._ctx.worker_id, lease.epoch
            )
        except Exception as exc:  # lost, unanswered, or it never won: nothing to give back
            logger.debug("late acquire not given back", error=describe(exc))

    def _start(self, lease: Lease, deadline: float, source: str) -> None:
        ctx = self._ctx
        acquired_mono = time.monotonic()
        holder = StreamHolder(
            lease, ctx, self._renewals, acquired_mono=acquired_mono, deadline_mono=deadline
        )
        ctx.events.record(LeaseEvent.ACQUIRED, lease.stream_id, lease.epoch, deadline_mono=deadline)
        self._renewals.track(holder)
        self._holdings.start(holder)
        ctx.metrics.incr(WorkerMetric.LEASES_ACQUIRED)
        if lease.is_takeover:
            ctx.metrics.incr(WorkerMetric.TAKEOVERS)
        logger.info(
            "lease acquired",
            stream_id=lease.stream_id,
            epoch=lease.epoch,
            last_seq=lease.last_seq,
            source=source,
            takeover=lease.is_takeover,
        )
        if ctx.shutdown_requested.is_set():
            # Won while the worker began draining: give it straight back.
            self._holdings.note_given_away(lease.stream_id)
            holder.request_end(EndReason.SHUTDOWN)
