"""Taking a stream: one conditional write, then a holder with its fence.

Every path that takes streams (SQS commands, the reconciler's orphans, scheduled takeovers of
per-stream leases, takeovers of a dead session's streams) comes through
:meth:`Acquirer.try_acquire`, so capacity, health, shutdown and the lease event log are handled
in one place. What differs by liveness mode is only the write and the fence:

- sessions: a checkpoint slot is reserved, the lease is attached to the current session (or
  taken from a dead one at its epoch), and the holder obeys the session's deadline;
- per-stream leases: the lease gets its own expiry, and the holder's deadline counts from the
  moment the acquire was sent.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from enum import StrEnum

from streamlease import rules
from streamlease.errors import LeaseConflict
from streamlease.lease_events import LeaseEventKind
from streamlease.lease_store import wall_ms
from streamlease.model import Lease
from streamlease.schema import Liveness
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fencing.fence import Fence, LeaseFence, SessionFence
from worker.fencing.session import Session
from worker.logs import describe, logger
from worker.ownership.end_reason import EndReason
from worker.ownership.holder import StreamHolder
from worker.ownership.holdings import Holdings
from worker.ownership.renewal import Renewals
from worker.tracing import StreamTrace


class Outcome(StrEnum):
    """How an acquire attempt ended."""

    WON = "won"
    HELD = "held"
    """This worker holds (or is acquiring) it already."""
    NO_ROOM = "no_room"
    """At capacity, unhealthy or shutting down: nothing was tried."""
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


@dataclass(frozen=True)
class DeadHolding:
    """A stream of a dead session, as the takeover found it: taken at exactly this owner and
    epoch, resuming at least at ``checkpoint`` (the session's vector; None: the item's own)."""

    owner: str
    epoch: int
    checkpoint: int | None


class _SessionGone(Exception):
    """The session ended while an acquire for it was in flight."""


class Acquirer:
    """Acquires streams for this worker and starts their holders."""

    def __init__(self, ctx: WorkerContext, holdings: Holdings, renewals: Renewals) -> None:
        """``renewals``: the per-stream renewal loop (idle in session mode)."""
        self._ctx = ctx
        self._holdings = holdings
        self._renewals = renewals
        self._sessions = ctx.settings.liveness is Liveness.SESSION
        self._unhealthy_reason: str | None = None

    def may_acquire(self) -> bool:
        """Whether this worker takes streams at all now: not shutting down, its event loop
        keeps up, its renewals keep up (the session is healthy; per-stream renewals are not a
        heartbeat behind), and its session has a checkpoint slot left (lost slots lower the
        capacity counted in :class:`Holdings`). Logs when the answer changes."""
        ctx = self._ctx
        if ctx.shutdown_requested.is_set():
            return False
        session = ctx.session
        if self._sessions and session is not None:
            self._holdings.capacity = session.slots.usable_capacity(ctx.settings.capacity)
        reason = self._unhealthy()
        if reason != self._unhealthy_reason:
            self._unhealthy_reason = reason
            if reason:
                logger.warning("taking no streams", reason=reason)
            else:
                logger.info("taking streams again")
        return reason is None

    def _unhealthy(self) -> str | None:
        ctx = self._ctx
        if ctx.loop_lagging:
            return "event loop lagging"
        session = ctx.session
        if session is None or not session.live:
            return "no live session"
        if self._sessions:
            if not session.healthy():
                return "session renewals behind"
            if session.retiring:
                return "session rolling over"
            usable = self._holdings.capacity
            if usable < ctx.settings.capacity and self._holdings.count >= usable:
                return "checkpoint slots lost"
        elif self._renewals.is_behind():
            return "renewals behind"
        elif self._renewals.unanswered():
            return "renewals unanswered"
        return None

    async def try_acquire(
        self,
        stream_id: str,
        *,
        source: str,
        dead: DeadHolding | None = None,
        trace_header: str | None = None,
    ) -> Outcome:
        """Try to take ``stream_id``; ``source`` (command, orphan, takeover) is for logs and
        traces only. ``dead``: take it from a dead session at that epoch instead of acquiring it
        free. ``trace_header``: the X-Ray trace header of the command that asked for it (the
        acquire span joins that trace).

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
        with ctx.tracing.acquire(stream_id, trace_header, source=source) as trace:
            outcome = await self._take(stream_id, source, dead, trace)
            trace.outcome(outcome.value)
        return outcome

    async def _take(
        self, stream_id: str, source: str, dead: DeadHolding | None, trace: StreamTrace
    ) -> Outcome:
        """The acquire write for a reserved ``stream_id``, then its holder if it was won."""
        try:
            if self._sessions:
                lease, fence = await self._acquire_in_session(stream_id, dead)
            else:
                lease, fence = await self._acquire_lease(stream_id)
        except LeaseConflict as conflict:
            self._holdings.cancel_reservation(stream_id)
            return _CONFLICTS.get(conflict.reason, Outcome.OWNED)
        except _SessionGone:
            self._holdings.cancel_reservation(stream_id)
            return Outcome.NO_ROOM
        except Exception as exc:  # StoreError or a bug: the stream stays for someone else
            self._holdings.cancel_reservation(stream_id)
            logger.info("acquire unanswered", stream_id=stream_id, error=describe(exc))
            return Outcome.UNANSWERED
        except asyncio.CancelledError:
            self._holdings.cancel_reservation(stream_id)
            raise
        self._start(lease, fence, source, trace)
        return Outcome.WON

    async def _acquire_in_session(
        self, stream_id: str, dead: DeadHolding | None
    ) -> tuple[Lease, Fence]:
        """Attach the stream to the current session in a fresh slot (see
        :mod:`worker.fencing.slots`)."""
        ctx = self._ctx
        session = ctx.session
        if session is None or not session.live:
            raise _SessionGone
        slot = session.slots.reserve(session.last_success_sent_mono)
        if slot is None:
            raise _SessionGone
        if dead is None:
            call = asyncio.to_thread(
                ctx.store.acquire, stream_id, session.worker_id, ctx.settings.lease_ms, slot=slot
            )
        else:
            call = asyncio.to_thread(
                ctx.store.take_from,
                stream_id,
                dead.owner,
                dead.epoch,
                dead.checkpoint,
                session.worker_id,
                slot,
            )
        try:
            lease = await self._await_acquire(call)
        except LeaseConflict as conflict:
            if conflict.write_may_land:
                session.lose_slot(slot, stream_id, time.monotonic(), write_may_land=True)
            else:
                session.slots.cancel(slot)
            raise
        except BaseException:
            # No answer: the write may land later, naming this slot on the stream item.
            session.lose_slot(slot, stream_id, time.monotonic(), write_may_land=True)
            raise
        if not session.live:
            # Won for a session that has just been lost: it is the dead session's now, and the
            # sweep of that session frees it.
            raise _SessionGone
        return lease, SessionFence(session, slot, stream_id, lease.epoch, lease.last_seq)

    async def _acquire_lease(self, stream_id: str) -> tuple[Lease, Fence]:
        """Acquire a per-stream lease; its deadline counts from the moment the call was *sent*.

        DynamoDB wrote an expiry of at least send time + lease. Should the store ever hand back
        a lease whose expiry is shorter than that (an earlier write), the deadline follows the
        stored expiry instead.
        """
        ctx = self._ctx
        settings = ctx.settings
        sent_mono, sent_wall = time.monotonic(), wall_ms()
        lease = await self._await_acquire(
            asyncio.to_thread(ctx.store.acquire, stream_id, ctx.worker_id, settings.lease_ms)
        )
        granted_seconds = min(settings.lease_seconds, (lease.expires_at_ms - sent_wall) / 1000.0)
        deadline = rules.fence_deadline_mono(
            sent_mono, granted_seconds, settings.fence_margin_seconds
        )
        fence = LeaseFence(stream_id, lease.epoch, deadline, settings, self._renewals)
        fence.sent_expires_ms = lease.expires_at_ms
        return lease, fence

    async def _await_acquire(self, call: asyncio.Future[Lease] | object) -> Lease:
        """Await an acquire; if the caller is cancelled (shutdown) meanwhile and the acquire
        won after all, release that lease at once rather than leave it unheld."""
        future: asyncio.Future[Lease] = asyncio.ensure_future(call)  # type: ignore[arg-type]
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await self._give_back_late(future)
            raise

    async def _give_back_late(self, call: asyncio.Future[Lease]) -> None:
        try:
            async with asyncio.timeout(self._ctx.settings.dynamodb_timeout_seconds * 3):
                lease = await call
            await asyncio.to_thread(
                self._ctx.store.release, lease.stream_id, lease.owner, lease.epoch
            )
        except Exception as exc:  # lost, unanswered, or it never won: nothing to give back
            logger.debug("late acquire not given back", error=describe(exc))

    def _start(self, lease: Lease, fence: Fence, source: str, trace: StreamTrace) -> None:
        ctx = self._ctx
        holder = StreamHolder(lease, ctx, fence, acquired_mono=time.monotonic())
        holder.trace = trace
        ctx.events.record(
            LeaseEventKind.ACQUIRED,
            lease.stream_id,
            lease.epoch,
            deadline_mono=fence.deadline_mono,
            worker_id=lease.owner,
        )
        if isinstance(fence, LeaseFence):
            self._renewals.track(holder, fence)
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


def session_of(ctx: WorkerContext) -> Session | None:
    """The current session if it is live (a convenience for the loops that need one)."""
    session = ctx.session
    return session if session is not None and session.live else None
