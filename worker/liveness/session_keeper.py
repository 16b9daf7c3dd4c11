"""This worker's sessions over its life: joining the fleet, opening a session, replacing a lost
one, and giving up when no renewal gets through (architecture §4a).

- **Join**: a worker refuses to start beside live workers of the other liveness mode.
- **Open**: a new session under a new id, retried while DynamoDB does not answer.
- **Keep**: a session the store reports expired, or that the renewal thread revoked because its
  renewals went unanswered (a gray failure, :mod:`worker.fencing.session`), takes every stream
  attached to it along (holders stop at once and write nothing more); then a new session under a new
  id, on *probation* (it takes no streams and judges no peer) until one of its renewals succeeds.
  A session that asked to be *rolled over* (its lost checkpoint slots leave it too little
  room, :mod:`worker.ownership.own_leases`) is still live: its streams are released with their
  checkpoints and handed off as in a drain, it is revoked, and a new session opens at once.
  A revoked session's streams are handed over at once: once its holders have stopped and
  nothing of theirs is left in the sink (or the fence margin past the session's deadline is
  over, which covers a send begun before it), each is freed at exactly its epoch with the
  checkpoint its holder acknowledged (fresher than any vector) and handed off — the sweep a
  peer would run a moment later, without the wait, and safe whatever the store says of the
  session, since nothing delivers under it any more. The
  new session then waits a lease: meanwhile this worker has no live session, so its peers do
  not count it when they share the streams out. In per-stream mode the leases are the streams'
  own, so only the worker item is replaced.
- **Give up**: a worker none of whose renewals was answered, in any of its sessions, for
  :data:`~streamlease.rules.UNREACHABLE_LEASES` leases can hold nothing. It writes why into
  its health file (``python -m worker.health`` fails from then on), gives its session up (its
  streams end without another write) and shuts down in a hurry; the process exits with
  :data:`EXIT_UNREACHABLE`, so ECS replaces it and the reaper frees what it still held.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final

from streamlease import rules
from streamlease.errors import SessionExpired, StoreError
from streamlease.lease_store import wall_ms
from streamlease.schema import Liveness
from streamlease.session_store import SessionStore
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fencing.session import Session, SessionState
from worker.health import mark_unhealthy
from worker.liveness.takeover import free_and_hand_off
from worker.logs import describe, logger
from worker.ownership.end_reason import EndReason
from worker.ownership.fleet_view import check_fleet_mode
from worker.ownership.holder import StreamHolder
from worker.ownership.holdings import Holdings

EXIT_UNREACHABLE: Final = 3
"""The exit status of a worker that gave up: no renewal answered for too long."""
OPEN_RETRY_SECONDS: Final = 1.0
"""Pause between attempts to read the fleet or open a session while DynamoDB does not answer."""
LOST_CHECK_SECONDS: Final = 0.2


class SessionKeeper:
    """Opens this worker's sessions, replaces lost ones and decides when to give up."""

    def __init__(
        self,
        ctx: WorkerContext,
        holdings: Holdings,
        renewal_sessions: SessionStore,
        observe: Callable[[str, float], None],
        leases_unanswered: Callable[[], bool],
    ) -> None:
        """``renewal_sessions``: the store on the renewal threads' own client; ``observe``:
        where sessions record their renewals' lag and round trip, and the keeper how long ago
        the last answered renewal was sent; ``leases_unanswered()``: whether the per-stream
        lease renewals go unanswered (per-stream mode: the sessions then advertise no
        capacity)."""
        self._ctx = ctx
        self._holdings = holdings
        self._renewal_sessions = renewal_sessions
        self._observe = observe
        self._uses_sessions = ctx.settings.liveness is Liveness.SESSION
        self._leases_unanswered = None if self._uses_sessions else leases_unanswered
        self._lost = asyncio.Event()
        self._incarnation = 0
        self._sessions_lost = 0
        self._renewal_answered_mono = 0.0
        """When a renewal was last answered (or the first session opened), monotonic."""
        self.gave_up = False
        """True once this worker gave up (it then exits with :data:`EXIT_UNREACHABLE`)."""

    async def join_fleet(self) -> None:
        """Refuse to start beside live workers of the other liveness mode. Raises
        :class:`ConfigError` naming both modes."""
        ctx = self._ctx
        while True:
            try:
                workers = await asyncio.to_thread(ctx.sessions.list_fleet)
            except StoreError as exc:
                logger.warning("fleet read failed", error=describe(exc))
                if await self._stopping_within(OPEN_RETRY_SECONDS):
                    return
                continue
            check_fleet_mode(workers, ctx.settings.liveness, wall_ms())
            return

    async def open_session(self) -> bool:
        """Open a new session under a new id, retrying while DynamoDB does not answer.
        False if shutdown was requested first."""
        ctx = self._ctx
        while not ctx.shutdown_requested.is_set():
            self._incarnation += 1
            session = Session(
                ctx.identity.session_id(self._incarnation),
                ctx.settings,
                ctx.identity,
                ctx.sessions,
                self._renewal_sessions,
                ctx.events,
                on_expired=lambda _: self._lost.set(),
                active_streams=lambda: self._holdings.active_count,
                observe=self._observe,
                probation=self._sessions_lost > 0,
                count=ctx.metrics.incr,
                leases_unanswered=self._leases_unanswered,
                load_figures=self._holdings.load.renewal_figures,
            )
            try:
                await session.open()
            except SessionExpired:
                continue  # the id is taken (a create answered late and swept?): another id
            except StoreError as exc:
                logger.warning("session not opened", error=describe(exc))
                self._incarnation -= 1
                await self._stopping_within(OPEN_RETRY_SECONDS)
                continue
            ctx.session = session
            if not self._renewal_answered_mono:
                self._renewal_answered_mono = session.created_mono
            ctx.events.worker_id = session.worker_id
            logger.append_keys(worker_id=session.worker_id)
            session.start()
            if self._incarnation > 1:
                logger.info("new session opened", incarnation=self._incarnation)
            return True
        return False

    async def keep(self) -> None:
        """Replace each lost session (see the module docstring), until shutdown or cancelled."""
        ctx = self._ctx
        while True:
            await self._lost.wait()
            self._lost.clear()
            lost = ctx.session
            if lost is None or (lost.live and not lost.retiring):
                continue
            if lost.live:
                await self._roll_over(lost)
                if ctx.shutdown_requested.is_set():
                    return
                await self.open_session()
                continue
            self._sessions_lost += 1
            if lost.state is SessionState.REVOKED:
                ctx.metrics.incr(WorkerMetric.SESSIONS_REVOKED)
            if self._uses_sessions:
                held = self._end_holders_of(lost, EndReason.LOST)
                await self._until_no_holder_of(lost)
                if lost.state is SessionState.REVOKED and not ctx.shutdown_requested.is_set():
                    await self._until_sink_settled(lost, held)
                    await self._hand_over(lost.worker_id, held)
            if lost.state is SessionState.REVOKED and await self._stopping_within(
                ctx.settings.lease_seconds
            ):
                return
            if ctx.shutdown_requested.is_set():
                return
            await self.open_session()

    def request_rollover(self) -> None:
        """Replace the current session by a fresh one (see the module docstring)."""
        session = self._ctx.session
        if session is None or not session.live or session.retiring:
            return
        session.retiring = True  # it takes no more streams from now on
        self._lost.set()

    def on_tick(self, now_mono: float | None = None) -> None:
        """Every second: copy the stream count for the next renewal, log a fencing, record
        how long ago the last answered renewal was sent, and give up when that is too long."""
        ctx = self._ctx
        now = time.monotonic() if now_mono is None else now_mono
        session = ctx.session
        if session is not None:
            session.refresh_active_streams()
            if self._uses_sessions and session.fenced(now):
                session.note_fenced()
            self._renewal_answered_mono = max(
                self._renewal_answered_mono, session.last_renewed_mono
            )
        if self._renewal_answered_mono:
            silent_ms = (now - self._renewal_answered_mono) * 1000.0
            self._observe(WorkerMetric.RENEWAL_ANSWER_AGE_MS, silent_ms)
        if (
            not self.gave_up
            and self._renewal_answered_mono
            and rules.is_unreachable(now, self._renewal_answered_mono, ctx.settings.lease_seconds)
        ):
            self._give_up(now - self._renewal_answered_mono)

    async def _roll_over(self, session: Session) -> None:
        self._ctx.metrics.incr(WorkerMetric.SESSION_ROLLOVERS)
        logger.warning("session rolling over", lost_slots=session.slots.lost)
        # Released with their checkpoints and handed off, as in a drain: the fleet (this
        # worker's next session among it) takes them up again within about a second.
        self._end_holders_of(session, EndReason.SHUTDOWN)
        await self._until_no_holder_of(session)
        await self._revoke(session)

    def _end_holders_of(self, session: Session, reason: EndReason) -> list[StreamHolder]:
        held = [h for h in self._holdings if h.owner == session.worker_id]
        for holder in held:
            holder.request_end(reason)
        return held

    async def _until_no_holder_of(self, session: Session) -> None:
        while any(h.owner == session.worker_id for h in self._holdings):
            await self._holdings.wait_changed(LOST_CHECK_SECONDS)

    async def _until_sink_settled(self, session: Session, held: list[StreamHolder]) -> None:
        """Until nothing of ``held`` is in the sink, or the fence margin has passed since the
        lost ``session``'s deadline (a send begun before the deadline has ended by then): only
        then may a peer deliver their streams (architecture §4, "Fencing")."""
        until = session.deadline_mono + self._ctx.settings.fence_margin_seconds
        for holder in held:
            if not await holder.delivery.wait_settled(until - time.monotonic()):
                return  # the margin is over: no batch of the session can still be sent

    async def _hand_over(self, session_id: str, held: list[StreamHolder]) -> None:
        """Free the streams of revoked session ``session_id`` whose holders ``held`` have
        stopped, at their acknowledged checkpoints, and hand them off."""
        async with asyncio.TaskGroup() as tasks:
            outcomes = [
                tasks.create_task(
                    free_and_hand_off(
                        self._ctx,
                        holder.stream_id,
                        session_id,
                        holder.epoch,
                        holder.acked_seq,
                        last_error=f"worker {session_id} got no answer to its session renewals",
                    ),
                    name=f"hand over {holder.stream_id}",
                )
                for holder in held
            ]
        freed = sum(1 for o in outcomes if o.result() == "freed")
        logger.info("revoked session handed over", session=session_id, freed=freed)

    async def revoke(self) -> None:
        """Tombstone the current session (live, or given up) on the way out. Whatever is still
        attached to it (a drain cut short) is swept by the fleet at once instead of after a
        lease; the fleet deletes the tombstone later."""
        session = self._ctx.session
        if session is not None:
            await self._revoke(session)

    async def _revoke(self, session: Session) -> None:
        if session.state not in (SessionState.LIVE, SessionState.REVOKED):
            return
        try:
            async with asyncio.timeout(max(0.1, 2 * self._ctx.settings.dynamodb_timeout_seconds)):
                await session.revoke()
        except (TimeoutError, StoreError) as exc:
            logger.warning("session not revoked", error=describe(exc))

    def _give_up(self, silent_seconds: float) -> None:
        ctx = self._ctx
        self.gave_up = True
        logger.error("giving up: no renewal answered", silent_seconds=round(silent_seconds, 1))
        try:
            mark_unhealthy(
                ctx.settings.health_file,
                f"no session renewal answered for {silent_seconds:.0f} s",
            )
        except OSError as exc:
            logger.warning("health file not writable", error=describe(exc))
        # Shutdown first: the keeper must not open another session for the streams it ends.
        ctx.shutdown_requested.set()
        ctx.hurry.set()
        session = ctx.session
        if session is not None and session.live:
            session.give_up()

    async def _stopping_within(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless shutdown is requested first; True if it was."""
        shutdown = self._ctx.shutdown_requested
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await shutdown.wait()
        return shutdown.is_set()
