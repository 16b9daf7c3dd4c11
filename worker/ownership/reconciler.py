"""Reconciliation: find streams that are wanted but unowned, and leases about to lapse.

Every ``reconcile_seconds`` (jittered) one read of the orphan index (``by-shard-expiry``: the
STARTED streams no session holds) returns streams whose lease expires before a bound:

- those already expired (before the acquire cutoff) are **orphans**: take some now, at random.
  Sessions scan one segment of the index (:func:`~streamlease.rules.scan_segments`: the whole of
  it in a small fleet, a part chosen at random in a large one, so that each part is read every
  round by a few workers and no worker reads all of a large fleet's orphans). A stream held
  through a session never is one: a dead session's streams are found by the fleet watcher;
- per-stream mode only, from its one shard: those that missed at least two heartbeats
  (**suspects**, below
  ``rules.suspect_bound_ms``): their holder is probably dead, so an acquire is scheduled just
  after their expiry (``rules.takeover_at_ms``). Crash failover then costs about one lease, not
  a lease plus a reconcile interval. If the holder renews meanwhile the attempt simply loses its
  conditional write.

A per-stream fleet writes and queries one shard, but a session fleet before a switch of mode
freed its streams into all of them, each with a handoff command that alone would bring it to the
new fleet. A command can be late or missing: one whose acquire went unanswered comes back only
after the queue's visibility timeout (30 s), one a stopping worker received comes back then too
if the worker exited before it could put it back, and a handoff whose send failed never comes.
So a per-stream reconcile also reads the whole index (one Scan:
:meth:`~streamlease.lease_store.LeaseStore.orphans`) at start-up, every
:data:`SWEEP_EVERY_ROUNDS` rounds, and every round after one that found free streams outside its
shard (until they were taken: an acquire moves a stream's entry into the per-stream shard). It
takes such a stream only when the read before found it too: most have their command on its way.

How many to take (:func:`room_for`): up to the room under the fair share, but at least this
worker's proportional part of the orphans, and never beyond capacity. A worker not below its
share leaves a stream released since its last round to the handoff command on its way to a
worker below the share, and takes it only if it is still unowned a round later.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Final

from streamlease import rules
from streamlease.errors import StoreError
from streamlease.indexes import expiry_shards
from streamlease.lease_store import wall_ms
from streamlease.model import LeaseView
from streamlease.schema import Liveness
from worker.context import WorkerContext
from worker.logs import describe, logger
from worker.ownership.acquisition import Acquirer, Outcome
from worker.ownership.fleet_view import FleetView, wants_handoffs
from worker.ownership.holdings import Holdings
from worker.ownership.rebalancer import jittered

MAX_PARALLEL_ACQUIRES: Final = 8
SWEEP_EVERY_ROUNDS: Final = 60
"""Per-stream leases: how often a reconcile reads the whole orphan index for what a session
fleet left in its shards (besides start-up, and rounds right after one that found some). A read
costs about 0.02 read units per stream (:meth:`~streamlease.lease_store.LeaseStore.orphans`):
at the production 5 s reconcile, one every 5 minutes: about 0.22 read units per stream per
worker-hour (550 at the 2,500 streams a per-stream fleet is bounded to)."""
TAKEOVER_JITTER_SECONDS: Final = 0.05
"""Spread of scheduled takeovers, so workers racing for one suspect do not collide exactly."""


def room_for(orphans: int, share: int, held: int, free: int, live_workers: int) -> int:
    """How many wanted-but-unowned streams this worker should try to take this round.

    The room under the fair share, or this worker's proportional part of the orphans if that is
    more (a stale share must not leave orphans unowned), capped by free capacity.
    """
    under_share = max(0, max(share, 1) - held)
    proportional = math.ceil(orphans / max(1, live_workers)) if orphans > 0 else 0
    return max(0, min(free, max(under_share, proportional)))


def query_limit(capacity: int) -> int:
    """Index items read per round: enough to fill this worker and to count the orphans."""
    return min(1000, 2 * capacity + 50)


class Reconciler:
    """Takes orphans each round and schedules takeovers of suspect leases."""

    def __init__(
        self, ctx: WorkerContext, acquirer: Acquirer, holdings: Holdings, view: FleetView
    ) -> None:
        self._ctx = ctx
        self._acquirer = acquirer
        self._holdings = holdings
        self._view = view
        self._takeovers: dict[str, float] = {}
        self._released_seen: set[str] = set()
        """Released streams (no owner, expiry 0) the last round found unowned."""
        self._rounds_to_sweep = 0
        """Per-stream leases: rounds until the next whole read of the orphan index."""
        self._left_seen: set[str] = set()
        """Per-stream leases: what the last whole read found beyond the query."""
        self._wake = asyncio.Event()
        self._parallel = asyncio.Semaphore(MAX_PARALLEL_ACQUIRES)

    async def reconcile_periodically(self) -> None:
        """Reconcile now, then every ``reconcile_seconds`` (±20 %), until cancelled."""
        while True:
            try:
                await self.reconcile_once()
            except Exception as exc:  # the next round tries again
                logger.warning("reconcile failed", error=describe(exc))
            await asyncio.sleep(jittered(self._ctx.settings.reconcile_seconds, random.random()))

    async def reconcile_once(self) -> int:
        """One round; returns how many orphans were acquired."""
        ctx = self._ctx
        settings = ctx.settings
        if ctx.shutdown_requested.is_set():
            return 0
        now = wall_ms()
        cutoff = rules.acquire_cutoff_ms(now, settings.clock_skew_ms)
        bound = cutoff
        if settings.schedule_suspects and settings.liveness is Liveness.STREAM:
            bound = max(
                cutoff,
                rules.suspect_bound_ms(
                    now, settings.lease_ms, int(settings.heartbeat_seconds * 1000)
                ),
            )
        limit = query_limit(settings.capacity)
        segments = 1
        if settings.liveness is Liveness.SESSION:
            segments = rules.scan_segments(self._view.live_workers, expiry_shards(Liveness.SESSION))
            views = await asyncio.to_thread(
                ctx.store.orphans,
                cutoff,
                limit=limit,
                segment=random.randrange(segments),
                segments=segments,
            )
        else:
            views = await asyncio.to_thread(ctx.store.expiring_before, bound, limit=limit)
            views += await self._sweep_session_shards(cutoff, limit, views)
        orphans = [v for v in views if v.expires_at_ms < cutoff]
        suspects = [v for v in views if v.expires_at_ms >= cutoff and v.owner != ctx.worker_id]
        self._view.orphans = len(orphans) * segments  # one segment seen: the fleet's estimate
        released = {v.stream_id for v in orphans if v.expires_at_ms == 0}
        seen, self._released_seen = self._released_seen, released
        if not self._acquirer.may_acquire():
            return 0
        holdings = self._holdings
        room = room_for(
            self._view.orphans + len(suspects),
            self._view.share,
            holdings.count,
            holdings.free,
            self._view.live_workers,
        )
        wanted = self._candidates(orphans)
        if settings.handoff_on_release and not wants_handoffs(
            self._view, holdings.count, holdings.load.total()
        ):
            # Not below its share (or the mean load): a stream released since the last round
            # has its handoff on the way to a worker below it (a rebalance, a drain); taking it
            # here would be a wasted move. Left for a round; one still unowned then is taken
            # (the share may be stale, and a handoff may have been lost).
            wanted = [s for s in wanted if s not in released or s in seen]
        random.shuffle(wanted)
        taking = wanted[:room]
        won = 0
        if taking:
            async with asyncio.TaskGroup() as tasks:
                attempts = [
                    tasks.create_task(self._acquire(s, "orphan"), name=f"acquire orphan {s}")
                    for s in taking
                ]
            won = sum(1 for a in attempts if a.result())
        self._schedule(self._candidates(suspects)[: max(0, room - len(taking))], suspects, now)
        return won

    async def _sweep_session_shards(
        self, cutoff_ms: int, limit: int, queried: list[LeaseView]
    ) -> list[LeaseView]:
        """Per-stream leases: the free streams a session fleet left in its other shards (those
        a whole read of the orphan index finds beyond ``queried``, the answer of this round's
        query of the per-stream shard), when a read is due (see the module docstring); else
        nothing."""
        self._rounds_to_sweep -= 1
        if self._rounds_to_sweep >= 0:
            return []
        try:
            every = await asyncio.to_thread(self._ctx.store.orphans, cutoff_ms, limit=limit)
        except StoreError as exc:  # the round goes on with its own shard; the next one retries
            logger.info("orphan index not read whole", error=describe(exc))
            return []
        known = {v.stream_id for v in queried}
        left = [v for v in every if v.stream_id not in known]
        # Read again next round only while there are some; a query cut at the limit leaves
        # orphans of its own shard that look the same, and those need no whole reads.
        again = bool(left) and len(queried) < limit
        self._rounds_to_sweep = 0 if again else SWEEP_EVERY_ROUNDS - 1
        seen, self._left_seen = self._left_seen, {v.stream_id for v in left}
        if left:
            logger.info("orphans found beyond the query", streams=len(left))
        # Most have a handoff command on its way (a drained fleet's): taking them at once as
        # well would double the new fleet's first acquires. One still here a read later is not
        # coming by command soon.
        return [v for v in left if v.stream_id in seen]

    def _candidates(self, views: list[LeaseView]) -> list[str]:
        return [
            v.stream_id
            for v in views
            if v.stream_id not in self._holdings
            and not self._holdings.given_away_recently(v.stream_id)
        ]

    def _schedule(self, chosen: list[str], suspects: list[LeaseView], now_ms: int) -> None:
        """Plan an acquire just after each chosen suspect's expiry (monotonic due times)."""
        if not chosen:
            return
        skew = self._ctx.settings.clock_skew_ms
        expiry = {v.stream_id: v.expires_at_ms for v in suspects}
        now_mono = time.monotonic()
        for stream_id in chosen:
            at_ms = rules.takeover_at_ms(expiry[stream_id], skew)
            due = now_mono + (at_ms - now_ms) / 1000.0 + random.random() * TAKEOVER_JITTER_SECONDS
            self._takeovers[stream_id] = due
        self._wake.set()

    async def take_over_suspects(self) -> None:
        """Run the scheduled takeovers when due, until cancelled."""
        async with asyncio.TaskGroup() as tasks:
            while True:
                self._wake.clear()
                now = time.monotonic()
                due = [s for s, at in self._takeovers.items() if at <= now]
                for stream_id in due:
                    del self._takeovers[stream_id]
                    if not self._ctx.shutdown_requested.is_set():
                        tasks.create_task(
                            self._acquire(stream_id, "takeover"),
                            name=f"take over suspect {stream_id}",
                        )
                upcoming = min(self._takeovers.values(), default=None)
                timeout = None if upcoming is None else max(0.0, upcoming - time.monotonic())
                try:
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    async def _acquire(self, stream_id: str, source: str) -> bool:
        async with self._parallel:
            outcome = await self._acquirer.try_acquire(stream_id, source=source)
        return outcome is Outcome.WON
