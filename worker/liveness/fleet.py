"""This worker in the fleet: watching sessions, counting the fair share, proving dead sessions
dead (architecture §4a).

Every ``fleet_recount_seconds`` the worker reads session items and:

- feeds the :class:`~streamlease.rules.DeadSessionDetector`; a session it judges dead is
  tombstoned (``hb = :seen``: one winner), and the winner takes its streams over
  (:mod:`worker.liveness.takeover`);
- sweeps any EXPIRED session it reads that still owns streams once it has been seen EXPIRED for
  a heartbeat (its winner died mid-takeover, or a drain left something behind), then deletes it;
- recounts the fair share.

What it reads depends on the fleet's size, so that what each worker reads stays flat:

- up to :data:`~streamlease.rules.FULL_READ_MAX_SESSIONS` session items, the whole fleet index
  (one small query) and the share from it (:func:`worker.ownership.fleet_view.update_view`);
- above, a *window*: the sessions after its own in the index's order (start time, wrapping
  around) until it has seen :data:`~streamlease.rules.WATCH_PEERS` live ones that renew, so each
  session is watched by the few workers before it; and the share from the fleet digest
  (:mod:`streamlease.fleet_digest`), read every :data:`DIGEST_READ_ROUNDS` rounds. One worker,
  the digest's writer (elected by a lease on the digest), reads the whole fleet every round,
  watches everyone like a small fleet's worker does, and publishes the counts.

In per-stream mode the same verdicts tidy the fleet list (a dead worker's item is tombstoned,
later deleted; its own leases lapse and are taken over by expiry), and free any stream still
attached to a dead session: a fleet that switched from sessions keeps the old sessions' streams
(held with no expiry of their own) until their sessions are swept (:mod:`worker.liveness.takeover`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Final

from streamlease import rules
from streamlease.errors import StoreError
from streamlease.fleet_digest import DigestStore, FleetDigest
from streamlease.lease_store import wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import WorkerState
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.liveness.peer_loads import PeerLoads
from worker.liveness.takeover import Takeover
from worker.logs import describe, logger
from worker.ownership.fleet_view import FleetView, update_view, view_from_digest
from worker.ownership.holdings import Holdings

FLEET_JITTER: Final = 0.1
"""Re-reads are spread by ± this fraction so workers do not read in lockstep."""
WINDOW_PAGE: Final = rules.WATCH_PEERS + 1
"""Sessions one window query asks for (about a KB: half a read unit); every session read is
watched, so each session has about this many watchers (and the elected one)."""
MAX_WINDOW_PAGES: Final = 8
DIGEST_READ_ROUNDS: Final = 5
"""A worker of a large fleet reads the digest every this many rounds (every round while it
sheds, and before a takeover frees streams it has no room for)."""
SETTLE_ROUNDS: Final = 2
"""How many rounds a takeover in a large fleet waits, once, before freeing streams it has no
room for: the digest then counts the sessions that died with this one (a zone lost), and the
streams go straight to workers with room instead of through the command queue."""


def digest_due(rounds: int, shedding: bool, every: int = DIGEST_READ_ROUNDS) -> bool:
    """Whether a worker of a large fleet reads the digest in its round number ``rounds``: every
    ``every`` rounds, and every round while it sheds (:attr:`FleetView.shedding`): the shares
    of a scale-out change as its streams move, and a giver judging by a share some rounds old
    stops a few streams early or late. A fleet at rest pays for the slow cadence only."""
    return shedding or rounds % every == 0


class FleetWatcher:
    """Reads the fleet, keeps :class:`FleetView` current and acts on dead sessions."""

    def __init__(
        self,
        ctx: WorkerContext,
        holdings: Holdings,
        view: FleetView,
        takeover: Takeover,
        digest: DigestStore,
    ) -> None:
        self._ctx = ctx
        self._holdings = holdings
        self._view = view
        self._takeover = takeover
        self._digest = digest
        self._detector = rules.DeadSessionDetector(ctx.settings.lease_seconds)
        self._expired_seen: dict[str, float] = {}
        self._breaker_logged = False
        self._large = False
        """The fleet has more session items than one worker reads each round."""
        self._writer = False
        """This worker publishes the digest (the fleet's elected watcher)."""
        self._rounds = 0
        self._published: tuple[int, int, int, int, int, bool] | None = None
        self._published_mono = -float("inf")
        self._peer_loads = PeerLoads(ctx.sessions, ctx.settings.heartbeat_seconds)
        takeover.settle = self.settle

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
        """One round (see the module docstring); returns the session items read. Raises
        :class:`StoreError` when the fleet cannot be read. Without ``tasks`` it only recounts."""
        ctx = self._ctx
        self._rounds += 1
        whole = not self._large or self._writer
        workers = await (
            asyncio.to_thread(ctx.sessions.list_fleet) if whole else self._read_window()
        )
        now = time.monotonic()
        me = ctx.worker_id
        self._detector.observe(
            ((w.worker_id, w.hb, w.is_live) for w in workers if w.worker_id != me), now
        )
        dead = frozenset(w.worker_id for w in workers if self._detector.is_stale(w.worker_id, now))
        was_large = self._large
        if whole:
            update_view(
                self._view,
                await self._peer_loads.with_loads(workers, me, now),
                me,
                self._holdings.active_count,
                dead,
                my_load=self._holdings.load.total(),
                slack=ctx.settings.rebalance_slack,
                capacity=self._holdings.capacity,
            )
            self._large = len(workers) > rules.FULL_READ_MAX_SESSIONS
        if tasks is None or ctx.shutdown_requested.is_set():
            return workers
        if self._large or was_large:  # a fleet grown small learns it from the digest too
            await self._keep_digest(workers if whole else None)
        session = ctx.session
        # This worker's own health as of now, not as of the read: the peers' loads and the
        # digest were awaited since, and a session fenced meanwhile must expire nobody.
        healthy = session is not None and session.healthy(time.monotonic())
        for session_id in self._detector.to_expire(now, observer_healthy=healthy):
            tasks.create_task(self._expire(session_id), name=f"expire session {session_id}")
        self._log_breaker()
        self._sweep_leftovers(workers, now, tasks)
        return workers

    # --- the window ------------------------------------------------------------------------

    async def _read_window(self) -> list[WorkerInfo]:
        """The sessions after this one in index order, until :func:`rules.window_complete`."""
        ctx = self._ctx
        session = ctx.session
        me = None if session is None else session.info()
        read: list[WorkerInfo] = []
        cursor = None
        wrapped = False
        now = time.monotonic()
        for _ in range(MAX_WINDOW_PAGES):
            page = await asyncio.to_thread(
                ctx.sessions.fleet_after, None if wrapped else me, WINDOW_PAGE, cursor=cursor
            )
            read += [w for w in page.sessions if w.worker_id != ctx.worker_id]
            if self._window_done(read, now):
                break
            if page.more is not None:
                cursor = page.more
            elif not wrapped and me is not None:
                wrapped, cursor = True, None  # from the start, up to this session
            else:
                break
            if wrapped and any(w.worker_id == ctx.worker_id for w in page.sessions):
                break
        return list({w.worker_id: w for w in read}.values())

    def _window_done(self, read: Sequence[WorkerInfo], now: float) -> bool:
        detector = self._detector
        return rules.window_complete(
            (
                w.is_live,
                detector.seen_hb(w.worker_id) == w.hb and detector.is_stale(w.worker_id, now),
            )
            for w in read
        )

    # --- the digest ------------------------------------------------------------------------

    async def _keep_digest(self, whole: Sequence[WorkerInfo] | None) -> None:
        """Publish the counts (the writer, from ``whole``), or read them every few rounds."""
        if self._writer and whole is not None:
            await self._publish(len(whole))
        elif digest_due(self._rounds, self._view.shedding):
            await self.read_digest()

    async def read_digest(self) -> FleetDigest | None:
        """Take the share from the digest; claim the digest if its writer went quiet."""
        ctx = self._ctx
        try:
            digest = await asyncio.to_thread(self._digest.read)
        except StoreError as exc:
            logger.info("fleet digest read failed", error=describe(exc))
            return None
        now = wall_ms()
        if digest is not None and digest.fresh(now):
            if not digest.written_at_ms:
                return digest  # claimed, not counted yet
            if digest.writer != ctx.worker_id:
                view_from_digest(self._view, digest)
            if digest.sessions <= rules.FULL_READ_MAX_SESSIONS:
                self._large = False  # small again: read the whole fleet from the next round
            return digest
        sessions = self._view.live_workers if digest is None else digest.sessions
        if (digest is None or digest.claimable(now, ctx.settings.clock_skew_ms)) and (
            random.random() < rules.claim_chance(sessions)
        ):
            await self._claim()
        return digest

    async def _claim(self) -> None:
        ctx = self._ctx
        try:
            self._writer = await asyncio.to_thread(
                self._digest.claim, ctx.worker_id, ctx.settings.lease_ms
            )
        except StoreError as exc:
            logger.info("fleet digest claim unanswered", error=describe(exc))
            return
        if self._writer:
            logger.info("fleet digest taken over: watching every session")
            self._published = None

    async def _publish(self, sessions: int) -> None:
        """Write the view when it changed, and at least every heartbeat (the claim's renewal)."""
        ctx, view = self._ctx, self._view
        held = view.total_streams - view.orphans  # every reader adds the orphans it sees
        counts = (
            sessions,
            view.live_workers,
            held,
            view.deficit,
            view.surplus,
            view.fill_to_share,
        )
        # the load moves a little every round: it goes out with the heartbeat's publish
        now = time.monotonic()
        if (
            counts == self._published
            and now - self._published_mono < ctx.settings.heartbeat_seconds
        ):
            return
        try:
            self._writer = await asyncio.to_thread(
                self._digest.publish,
                ctx.worker_id,
                ctx.settings.lease_ms,
                sessions=sessions,
                live=view.live_workers,
                total=held,
                deficit=view.deficit,
                surplus=view.surplus,
                fill_to_share=view.fill_to_share,
                load=view.load,
            )
        except StoreError as exc:
            logger.info("fleet digest not written", error=describe(exc))
            return
        self._published, self._published_mono = counts, now

    async def resign(self) -> None:
        """A draining writer hands the digest over at once (claimable by anyone)."""
        if not self._writer:
            return
        self._writer = False
        try:
            await asyncio.to_thread(self._digest.resign, self._ctx.worker_id)
        except StoreError as exc:
            logger.info("fleet digest not handed over", error=describe(exc))

    async def settle(self) -> None:
        """Before a takeover frees streams it has no room for: in a large fleet, wait
        :data:`SETTLE_ROUNDS` rounds and read the digest again (see the constant)."""
        if not self._large or self._writer:
            return
        await asyncio.sleep(SETTLE_ROUNDS * self._ctx.settings.fleet_recount_seconds)
        await self.read_digest()

    # --- dead sessions ---------------------------------------------------------------------

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
        assert expiry.session is not None
        await self._takeover.take_over(expiry.session)

    def _sweep_leftovers(
        self, workers: Sequence[WorkerInfo], now: float, tasks: asyncio.TaskGroup
    ) -> None:
        """Sweep each EXPIRED session read once a heartbeat, from a heartbeat after it was first
        seen so (its winner is done, or dead)."""
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
        await self._takeover.take_over(session)

    def _log_breaker(self) -> None:
        open_now = self._detector.breaker_open
        if open_now and not self._breaker_logged:
            logger.warning("every other session looks dead at once: expiring none for now")
        elif self._breaker_logged and not open_now:
            logger.info("fleet looks healthy again")
        self._breaker_logged = open_now
