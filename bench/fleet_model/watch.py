"""How a simulated worker watches the fleet, learns its fair share and finds orphans.

Today's design: every worker reads every worker item each second (the fleet index, one
partition key value) and queries the orphans' one ``by-state-expiry`` partition each round.

The flat design: a fleet of at most :data:`~streamlease.rules.FULL_READ_MAX_SESSIONS` sessions
is read as today; a larger one is watched by a ring (each worker reads the sessions after its
own until it has seen :data:`~streamlease.rules.WATCH_PEERS` live ones) and by one elected
watcher, the holder of the fleet digest, who reads the whole fleet each second and writes the
digest (live workers, streams, deficit: the fair share) every few seconds. Orphans are scanned
in :func:`~streamlease.rules.scan_segments` segments of the write-sharded orphan index.

The model keeps a per-second cache of the fleet as a whole read sees it
(:func:`whole_fleet_view`): today's workers all read the same index every second, so each takes
that view when its read succeeds; only :attr:`Agent.observer` workers run a detector of their
own (a sample of the fleet, whose tombstone attempts count for every observer they stand for).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from bench.fleet_model.agents import Agent
from bench.fleet_model.events import Answer
from bench.fleet_model.sessions import Session
from bench.fleet_model.units import read_units
from bench.fleet_model.world import World
from streamlease import rules
from streamlease.schema import FLEET_DIGEST_KEY, WorkerState
from worker.liveness.fleet import MAX_WINDOW_PAGES, WINDOW_PAGE, digest_due
from worker.ownership.fleet_view import FleetView, update_view
from worker.ownership.reconciler import query_limit

DIGEST_WRITE_SECONDS: Final = 1.0
"""The writer publishes when the counts changed, at most once a round."""


def whole_fleet_view(world: World[Agent]) -> FleetView:
    """The fair share as a whole read of the fleet index shows it now (cached per second):
    :func:`worker.ownership.fleet_view.update_view` over every session item, sessions unrenewed for
    a lease counted dead, orphans as a reconcile query sees them."""
    second = math.floor(world.sim.now)
    cached = world.cache.get("view")
    if cached is not None and cached[0] == second:
        return cached[1]  # type: ignore[no-any-return]
    sessions = world.fleet.in_order()
    lease = world.settings.lease_seconds
    now = world.sim.now
    dead = frozenset(s.sid for s in sessions if s.live and now - s.renewed_at >= lease)
    me = next((s for s in sessions if s.state is WorkerState.RUNNING and s.agent.alive), None)
    view = FleetView()
    if me is not None:
        view.orphans = min(world.free.count(), query_limit(me.agent.capacity))
        infos = [s.info(s.agent.capacity) for s in sessions]
        update_view(
            view,
            infos,
            me.sid,
            len(me.held),
            dead,
            my_load=me.load,
            slack=world.settings.rebalance_slack,
            capacity=me.agent.capacity,
        )
    world.cache["view"] = (second, view)
    return view


def copy_view(view: FleetView, into: FleetView, now: float) -> None:
    """``view``'s counts into ``into`` at ``now``: a whole read of the fleet, or the
    digest's."""
    into.recount(view.total_streams, view.live_workers)
    into.fill_to_share = view.fill_to_share
    into.note_balance(view.deficit, view.surplus, now)
    into.load = view.load


class Watch:
    """One agent's fleet watcher and orphan finder."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.world = agent.world
        lease = self.world.settings.lease_seconds
        self.detector = rules.DeadSessionDetector(lease) if agent.observer else None
        self._expired_seen: dict[int, float] = {}
        self._rounds = 0
        self._last_digest_write = -math.inf

    # --- the fleet round ---------------------------------------------------------------------

    def round(self) -> None:
        """One fleet round (every ``fleet_recount_seconds`` ± 10 %)."""
        agent, world = self.agent, self.world
        if not agent.alive:
            return
        jitter = world.rng.uniform(0.9, 1.1)
        world.sim.after(world.settings.fleet_recount_seconds * jitter, self.round)
        if agent.session is None:
            return
        self._rounds += 1
        ring = world.design.ring_watch
        if not ring or len(world.fleet) <= rules.FULL_READ_MAX_SESSIONS or self.writes_digest:
            self._read_whole()
        else:
            self._read_window([], 0)
            if digest_due(self._rounds, agent.view.shedding, world.design.digest_read_rounds):
                self._read_digest()

    @property
    def writes_digest(self) -> bool:
        """This agent holds the fleet digest (it is the elected watcher)."""
        return self.world.digest.writer is self.agent

    def _read_whole(self) -> None:
        world = self.world
        bytes_ = len(world.fleet) * world.units.fleet_entry_bytes
        seen: list[tuple[Session, int, bool]] = []
        observe = self.detector is not None

        def snapshot() -> None:
            if observe:
                seen.extend((s, s.hb, s.live) for s in world.fleet.in_order())

        def answered(answer: Answer) -> None:
            if answer is not Answer.OK or not self.agent.alive:
                return
            copy_view(whole_fleet_view(world), self.agent.view, world.sim.now)
            if observe:
                self._judge(seen)
            if self.writes_digest:
                self._write_digest()

        touch = world.fleet_touch(read_units(bytes_), write=False)
        world.write([touch], [], lambda: True, snapshot, answered)

    def _read_window(self, seen: list[tuple[Session, int, bool]], page: int) -> None:
        world, agent = self.world, self.agent
        session = agent.session
        if session is None:
            return
        entries = world.fleet.after(session, WINDOW_PAGE, skip=page * WINDOW_PAGE)

        def snapshot() -> None:
            seen.extend((s, s.hb, s.live) for s in entries)

        def answered(answer: Answer) -> None:
            if answer is not Answer.OK or not agent.alive:
                return
            now = world.sim.now
            assert self.detector is not None
            done = rules.window_complete(
                (
                    live,
                    live
                    and self.detector.unchanged_seconds(s.sid, now) >= self.detector.lease_seconds,
                )
                for s, _, live in seen
            )
            more = (page + 1) * WINDOW_PAGE < len(world.fleet) - 1
            if not done and more and page + 1 < MAX_WINDOW_PAGES:
                self._read_window(seen, page + 1)
            else:
                self._judge(seen)

        touch = world.fleet_touch(
            read_units(len(entries) * world.units.fleet_entry_bytes), write=False
        )
        world.write([touch], [], lambda: True, snapshot, answered)

    def _judge(self, seen: list[tuple[Session, int, bool]]) -> None:
        """Feed the detector, tombstone what it names, sweep leftovers (the worker's
        :meth:`FleetWatcher.refresh`)."""
        agent, world = self.agent, self.world
        assert self.detector is not None
        now = world.sim.now
        mine = agent.session
        self.detector.observe(((s.sid, hb, live) for s, hb, live in seen if s is not mine), now)
        weight = self._weight()
        for sid in self.detector.to_expire(now, observer_healthy=agent.healthy()):
            target = world.fleet.by_no[int(sid.rsplit(".", 1)[1])]
            seen_hb = self.detector.seen_hb(sid)
            if seen_hb is not None:
                agent.takeover.expire(target, seen_hb, weight)
        expired = {s.no: s for s, _, live in seen if not live and s.state is WorkerState.EXPIRED}
        heartbeat = world.settings.heartbeat_seconds
        self._expired_seen = {no: self._expired_seen.get(no, now) for no in expired}
        for no, first in self._expired_seen.items():
            if now - first >= heartbeat and not agent.takeover.busy_with(no):
                self._expired_seen[no] = now
                agent.takeover.sweep_leftover(expired[no], weight)

    def _weight(self) -> float:
        """How many workers this observer stands for (today's design samples observers)."""
        world = self.world
        if world.design.ring_watch:
            return 1.0
        second = math.floor(world.sim.now)
        cached = world.cache.get("weight")
        if cached is None or cached[0] != second:
            alive = [a for a in world.agents if a.alive]
            observers = sum(1 for a in alive if a.observer)
            cached = (second, max(1.0, len(alive) / max(1, observers)))
            world.cache["weight"] = cached
        return float(cached[1])

    # --- the digest ------------------------------------------------------------------------------

    def refresh_share(self, then: Callable[[], None]) -> None:
        """Re-read the fair share now (the digest in a large fleet), then ``then()``."""
        if self.world.design.ring_watch and len(self.world.fleet) > rules.FULL_READ_MAX_SESSIONS:
            self._read_digest(then)
        else:
            self.world.sim.after(self.world.rtt(), then)

    def _read_digest(self, then: Callable[[], None] | None = None) -> None:
        world, agent = self.world, self.agent
        digest = world.digest

        def answered(answer: Answer) -> None:
            if then is not None:
                world.sim.after(0.0, then)
            if answer is not Answer.OK or not agent.alive:
                return
            now = world.sim.now
            skew = world.settings.clock_skew_seconds
            if digest.expires_at >= now:
                copy_view(digest.view, agent.view, world.sim.now)
            elif digest.expires_at < now - skew and world.rng.random() < rules.claim_chance(
                len(world.fleet)
            ):
                self._claim_digest()

        touch = world.key_touch(FLEET_DIGEST_KEY, read_units(world.units.digest_bytes), write=False)
        world.read([touch], answered)

    def _claim_digest(self) -> None:
        world, agent = self.world, self.agent
        digest = world.digest
        skew = world.settings.clock_skew_seconds

        def stale() -> bool:
            return digest.expires_at < world.sim.now - skew

        def take() -> None:
            digest.writer = agent
            digest.expires_at = world.sim.now + world.settings.lease_seconds

        touches = [world.key_touch(FLEET_DIGEST_KEY, 1.0, write=True)]
        world.write(touches, touches, stale, take, None)

    def _write_digest(self) -> None:
        world, agent = self.world, self.agent
        now = world.sim.now
        if now - self._last_digest_write < DIGEST_WRITE_SECONDS:
            return
        self._last_digest_write = now
        digest = world.digest
        view = FleetView()
        copy_view(whole_fleet_view(world), view, world.sim.now)

        def mine() -> bool:
            return digest.writer is agent

        def publish() -> None:
            digest.view = view
            digest.expires_at = world.sim.now + world.settings.lease_seconds

        cost = world.units.digest_write or {"table": 1.0}
        touches = [world.key_touch(FLEET_DIGEST_KEY, u, write=True) for u in cost.values()]
        world.write(touches, touches[:1], mine, publish, None)

    # --- orphans ---------------------------------------------------------------------------------

    def find_orphans(self, then: callable) -> None:  # type: ignore[valid-type]
        """One reconcile read of the orphan index; ``then(found)`` with the free streams read."""
        world, agent = self.world, self.agent
        design = world.design
        limit = query_limit(agent.capacity)
        if design.ring_watch:
            segments = rules.scan_segments(agent.view.live_workers, design.orphan_shards)
            segment = world.rng.randrange(segments)
            shards = [k for k in range(design.orphan_shards) if k % segments == segment]
        else:
            segments, shards = 1, list(range(design.orphan_shards))
        found: list[int] = []

        def snapshot() -> None:
            found.extend(world.free.first(shards, limit))

        def answered(answer: Answer) -> None:
            if answer is not Answer.OK or not agent.alive:
                return
            agent.view.orphans = len(found) * segments
            then(found)

        units = read_units(
            world.free.count(shards)
            and min(limit, world.free.count(shards)) * world.units.orphan_entry_bytes
        )
        world.write(world.orphan_read(shards, units), [], lambda: True, snapshot, answered)
