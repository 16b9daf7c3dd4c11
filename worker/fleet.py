"""This worker in the fleet: re-reading every worker item each second, counting the fair share,
and proving dead sessions dead (architecture §4a).

Every ``fleet_recount_seconds`` the worker reads the fleet index (one small query) and:

- recounts the fair share (:func:`count_fleet`): live workers are RUNNING sessions whose ``hb``
  still moves; their streams, the draining ones' and the orphans are what is shared;
- feeds the :class:`~streamlease.rules.DeadSessionDetector`; a session it judges dead is
  tombstoned (``hb = :seen``: one winner), and the winner takes its streams over
  (:mod:`worker.takeover`);
- sweeps any EXPIRED session that still owns streams once it has been seen EXPIRED for a
  heartbeat (its winner died mid-takeover, or a drain left something behind), then deletes it.

In per-stream mode the same verdicts only tidy the fleet list (a dead worker's item is
tombstoned, later deleted); its streams lapse and are taken over by expiry.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Final

from streamlease import rules
from streamlease.errors import StoreError
from streamlease.model import WorkerInfo
from streamlease.schema import Liveness, WorkerState
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fleet_view import FleetView, update_view
from worker.holdings import Holdings
from worker.logs import describe, logger
from worker.takeover import Takeover

FLEET_JITTER: Final = 0.1
"""Re-reads are spread by ± this fraction so workers do not read in lockstep."""


class FleetWatcher:
    """Re-reads the fleet, keeps :class:`FleetView` current and acts on dead sessions."""

    def __init__(
        self, ctx: WorkerContext, holdings: Holdings, view: FleetView, takeover: Takeover
    ) -> None:
        self._ctx = ctx
        self._holdings = holdings
        self._view = view
        self._takeover = takeover
        self._detector = rules.DeadSessionDetector(ctx.settings.lease_seconds)
        self._expired_seen: dict[str, float] = {}
        self._breaker_logged = False

    async def watch_fleet(self, tasks: asyncio.TaskGroup) -> None:
        """Re-read the fleet every ``fleet_recount_seconds`` until cancelled; sweeps run as
        tasks of ``tasks``."""
        interval = self._ctx.settings.fleet_recount_seconds
        while True:
            try:
                await self.refresh(tasks)
            except Exception as exc:  # the next round tries again
                logger.warning("fleet read failed", error=describe(exc))
            await asyncio.sleep(interval * (1 - FLEET_JITTER + 2 * FLEET_JITTER * random.random()))

    async def refresh(self, tasks: asyncio.TaskGroup | None = None) -> list[WorkerInfo]:
        """One round (see the module docstring). Raises :class:`StoreError` when the fleet
        cannot be read. Without ``tasks`` it only recounts."""
        ctx = self._ctx
        workers = await asyncio.to_thread(ctx.sessions.list_fleet)
        now = time.monotonic()
        me = ctx.worker_id
        self._detector.observe(
            ((w.worker_id, w.hb, w.is_live) for w in workers if w.worker_id != me), now
        )
        dead = frozenset(w.worker_id for w in workers if self._detector.is_stale(w.worker_id, now))
        update_view(self._view, workers, me, self._holdings.active_count, dead)
        if tasks is None or ctx.shutdown_requested.is_set():
            return workers
        session = ctx.session
        healthy = session is not None and session.healthy(now)
        for session_id in self._detector.to_expire(now, observer_healthy=healthy):
            tasks.create_task(self._expire(session_id), name=f"expire session {session_id}")
        self._log_breaker()
        self._sweep_leftovers(workers, now, tasks)
        return workers

    async def _expire(self, session_id: str) -> None:
        """Tombstone a session judged dead; the winner takes its streams over."""
        ctx = self._ctx
        seen = self._detector.seen_hb(session_id)
        if seen is None:
            return
        try:
            expiry = await asyncio.to_thread(
                ctx.sessions.expire, session_id, by=ctx.worker_id, seen_hb=seen
            )
        except StoreError as exc:
            logger.info("session expiry unanswered", session=session_id, error=describe(exc))
            return
        if not expiry.won:
            return  # it renewed after all, or another worker won the tombstone
        ctx.metrics.incr(WorkerMetric.SESSIONS_EXPIRED)
        logger.warning(
            "session expired by peer",
            session=session_id,
            hb=seen,
            unchanged_seconds=round(
                self._detector.unchanged_seconds(session_id, time.monotonic()), 3
            ),
        )
        if ctx.settings.liveness is Liveness.SESSION:
            assert expiry.session is not None
            await self._takeover.take_over(expiry.session)

    def _sweep_leftovers(
        self, workers: Sequence[WorkerInfo], now: float, tasks: asyncio.TaskGroup
    ) -> None:
        """Sweep each EXPIRED session once a heartbeat, from a heartbeat after it was first seen
        so (its winner is done, or dead)."""
        heartbeat = self._ctx.settings.heartbeat_seconds
        expired = {w.worker_id for w in workers if w.state is WorkerState.EXPIRED}
        self._expired_seen = {sid: self._expired_seen.get(sid, now) for sid in expired}
        for session_id, last in self._expired_seen.items():
            if now - last >= heartbeat and not self._takeover.busy_with(session_id):
                self._expired_seen[session_id] = now
                tasks.create_task(
                    self._sweep(session_id), name=f"sweep expired session {session_id}"
                )

    async def _sweep(self, session_id: str) -> None:
        try:
            session = await asyncio.to_thread(self._ctx.sessions.read, session_id)
        except StoreError as exc:
            logger.info("session read failed", session=session_id, error=describe(exc))
            return
        if session is None or session.state is not WorkerState.EXPIRED:
            return
        if self._ctx.settings.liveness is Liveness.SESSION:
            await self._takeover.take_over(session)
        else:  # per-stream leases lapse on their own: only the item is left to tidy
            await self._takeover.delete_if_old(session)

    def _log_breaker(self) -> None:
        open_now = self._detector.breaker_open
        if open_now and not self._breaker_logged:
            logger.warning("every other session looks dead at once: expiring none for now")
        elif self._breaker_logged and not open_now:
            logger.info("fleet looks healthy again")
        self._breaker_logged = open_now
