"""One simulated worker: its session, fleet reads, reconcile, command poll, rebalance, drain.

Each loop mirrors the worker's own (:mod:`worker.fencing.session`, :mod:`worker.liveness.fleet`,
:mod:`worker.ownership.reconciler`, :mod:`worker.ownership.commands`,
:mod:`worker.ownership.rebalancer`, the drain in :mod:`worker.app`) with its timers and jitter, and
takes its decisions with the same rules: :class:`~streamlease.rules.DeadSessionDetector`,
:func:`~streamlease.rules.fair_share` through :func:`worker.ownership.fleet_view.update_view`,
:func:`~worker.ownership.reconciler.room_for`, :func:`~streamlease.rules.may_take_more`,
:func:`~streamlease.placement.count_to_shed`, :func:`~streamlease.placement.choose_by_load`.
What differs by design — how the fleet is watched, where
orphans are found — is in :mod:`bench.fleet_model.watch`; taking over a dead session's streams in
:mod:`bench.fleet_model.takeover`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final

from bench.fleet_model.batcher import Batcher
from bench.fleet_model.events import Answer, Request
from bench.fleet_model.parts import TakingOver, Watching
from bench.fleet_model.sessions import Session
from bench.fleet_model.store import Touch
from bench.fleet_model.units import read_units
from bench.fleet_model.world import World
from streamlease import placement, rules
from streamlease.schema import WorkerState
from worker.ownership.commands import (
    MAX_MESSAGES_PER_RECEIVE,
    PASS_ON_LIMIT,
    PASS_ON_PAUSE_SECONDS,
    receive_count,
)
from worker.ownership.fleet_view import FleetView, wants_handoffs
from worker.ownership.rebalancer import jittered
from worker.ownership.reconciler import MAX_PARALLEL_ACQUIRES

IDLE_CHECK_SECONDS: Final = 0.25
"""How often a worker that may not take more looks again (the worker: 0.1 s, in memory)."""
RELEASE_PARALLEL: Final = 8
"""Releases in flight (a worker's holders release from its thread pool)."""
CONNECT_SECONDS: Final = 0.25
"""From an acquire to the connection-state write (the upstream's handshake), and how long the
worker's one connection-state writer gathers changes into one round of writes."""
REOPEN_SECONDS: Final = 0.5


class Agent:
    """One worker process. Its watch and takeover are fitted on by whoever builds the fleet
    (:func:`bench.fleet_model.scenarios.build`): they act on the agent, and it calls them."""

    def __init__(self, world: World[Agent], idx: int, capacity: int, *, observer: bool) -> None:
        """``observer``: runs its own dead-session detector (else it only loads the store)."""
        self.world = world
        self.idx = idx
        self.capacity = capacity
        self.observer = observer
        self.alive = False
        self.draining = False
        self.session: Session | None = None
        self.last_ok = -math.inf
        """Send time of the last successful session renewal."""
        self.reserved = 0
        self.view = FleetView()
        self.paused_until = 0.0
        self.next_take = 0.0
        """When the next rebalance handoff may be taken
        (:func:`streamlease.placement.take_delay`)."""
        self._acquires = Batcher(world, MAX_PARALLEL_ACQUIRES)
        self._releases = Batcher(world, RELEASE_PARALLEL)
        self._connected: list[int] = []
        self._free_seen: set[int] = set()
        """Free streams the last reconcile round found."""
        self.watch: Watching
        self.takeover: TakingOver

    # --- state ----------------------------------------------------------------------------

    @property
    def held(self) -> int:
        """Streams attached to the current session, plus acquires in flight."""
        return (len(self.session.held) if self.session else 0) + self.reserved

    @property
    def load(self) -> float | None:
        """What its streams cost it (load units per second); None without load figures."""
        rate = self.world.rate
        if rate is None:
            return None
        return sum(rate[x] for x in self.session.held) if self.session else 0.0

    def below_mean_load(self) -> bool:
        """Below the fleet's mean load (the worker's :meth:`CommandPoller._below_mean_load`)."""
        fleet, mine = self.view.load, self.load
        return fleet is not None and mine is not None and placement.takes_by_load(mine, fleet)

    def wants_handoffs(self) -> bool:
        """A rebalance handoff is for it (:func:`~worker.ownership.fleet_view.wants_handoffs`)."""
        return wants_handoffs(self.view, self.held, self.load)

    def may_take_more(self) -> bool:
        """The worker's poll gate
        (:meth:`~worker.ownership.commands.CommandPoller._may_take_more`)."""
        view = self.view
        if rules.may_take_more(
            self.held,
            view.share,
            self.capacity,
            fill_to=view.fill_line,
            hold_off=view.holds_off(self.world.sim.now, self.world.settings.rebalance_seconds),
        ):
            return True
        return self.held < self.capacity and self.below_mean_load()

    def healthy(self) -> bool:
        """The session is live, inside its fence and renewals are not a heartbeat behind."""
        s = self.world.settings
        if self.session is None or not self.session.live:
            return False
        now = self.world.sim.now
        deadline = rules.fence_deadline_mono(self.last_ok, s.lease_seconds, s.fence_margin_seconds)
        behind = now - (self.last_ok + s.heartbeat_seconds)
        return rules.is_safe_to_deliver(now, deadline) and behind <= s.heartbeat_seconds

    def may_acquire(self) -> bool:
        """Takes streams: alive, not draining, healthy."""
        return self.alive and not self.draining and self.healthy()

    # --- life -------------------------------------------------------------------------------

    def boot(self, *, fresh: bool) -> None:
        """Start the process. ``fresh``: a new task (creates its session, reads the fleet);
        else a worker that has run for a while (its loops at random phases)."""
        self.alive = True
        world = self.world
        if fresh:
            self._open_session()
            return
        self.session = world.fleet.create(self, -world.rng.uniform(60, 600))
        self.last_ok = -world.rng.uniform(0, world.settings.heartbeat_seconds)
        self.session.renewed_at = self.last_ok
        self._start_loops(world.rng.random())

    def _open_session(self) -> None:
        world = self.world
        session = world.fleet.create(self, world.sim.now)
        units = world.units.session_create

        def opened(answer: Answer) -> None:
            if answer is Answer.OK and self.alive:
                self.session = session
                self.last_ok = session.renewed_at = world.sim.now
                self._start_loops(0.0)
            elif self.alive:
                world.sim.after(REOPEN_SECONDS, self._open_session)

        world.write(self._item_writes(session, units), [], lambda: True, None, opened)

    def _start_loops(self, phase: float) -> None:
        s, sim, rng = self.world.settings, self.world.sim, self.world.rng
        sim.after(max(0.0, self.last_ok + s.heartbeat_seconds - sim.now), self._renew)
        sim.after(phase * s.fleet_recount_seconds, self.watch.round)
        sim.after(rng.uniform(0.8, 1.0) * s.heartbeat_seconds * (phase or 1), self._own_poll)
        sim.after(rng.random() * s.reconcile_seconds, self._reconcile)
        sim.after(jittered(s.rebalance_seconds, rng.random()), self._rebalance)
        sim.after(0.0, self.poll)

    def kill(self) -> None:
        """kill -9: nothing more is sent; the streams it held have no live holder."""
        if not self.alive:
            return
        self.alive = False
        if self.session is not None and self.session.live:
            self.world.add_unowned(len(self.session.held))

    def _item_writes(self, session: Session, units: Mapping[str, float]) -> list[Touch]:
        """A write of the session's item: its table partition and the fleet index."""
        world = self.world
        return [
            world.fleet_touch(amount, write=True)
            if component == "fleet"
            else world.key_touch(f"WORKER#{session.sid}", amount, write=True)
            for component, amount in units.items()
        ]

    # --- the session ------------------------------------------------------------------------

    def _renew(self) -> None:
        world, s = self.world, self.world.settings
        session = self.session
        if not self.alive or session is None or not session.live:
            return
        sent = world.sim.now
        table = world.units.renewal_table_units(len(session.held))
        touches = [world.key_touch(f"WORKER#{session.sid}", table, write=True)]
        touches += [world.fleet_touch(u, write=True) for u in world.units.renewal_index.values()]

        def bump() -> None:
            session.hb += 1
            session.renewed_at = world.sim.now
            session.active = len(session.held)
            session.load = self.load

        def answered(answer: Answer) -> None:
            if not self.alive or self.session is not session:
                return
            if answer is Answer.OK:
                self.last_ok = max(self.last_ok, sent)
                world.sim.at(sent + s.heartbeat_seconds, self._renew)
            elif answer is Answer.CONFLICT:
                self._session_lost()
            else:
                world.sim.after(
                    rules.retry_delay_seconds(s.heartbeat_seconds, world.rng.random()), self._renew
                )

        conflict = [world.key_touch(f"WORKER#{session.sid}", table, write=True)]
        world.write(touches, conflict, lambda: session.live, bump, answered, attempts=1)

    def _session_lost(self) -> None:
        """The session was tombstoned: its streams are the sweepers' now; a new session."""
        self.session = None
        self.world.sim.after(REOPEN_SECONDS, self._open_session)

    # --- own streams, orphans, commands ----------------------------------------------------------

    def _own_poll(self) -> None:
        world, s = self.world, self.world.settings
        if not self.alive:
            return
        world.sim.after(world.rng.uniform(0.8, 1.0) * s.heartbeat_seconds, self._own_poll)
        if self.session is None:
            return
        units = read_units(len(self.session.held) * world.units.owner_entry_bytes)
        world.read([world.owner_touch(self.session.sid, units, write=False)], _ignore)

    def _reconcile(self) -> None:
        world, s = self.world, self.world.settings
        if not self.alive or self.draining:
            return
        world.sim.after(jittered(s.reconcile_seconds, world.rng.random()), self._reconcile)
        self.watch.find_orphans(self._take_orphans)

    def _take_orphans(self, found: list[int]) -> None:
        from worker.ownership.reconciler import room_for

        if not self.may_acquire():
            return
        room = room_for(
            self.view.orphans,
            self.view.share,
            self.held,
            max(0, self.capacity - self.held),
            self.view.live_workers,
        )
        owner = self.world.owner
        wanted = [s for s in found if owner[s] == -1]
        seen, self._free_seen = self._free_seen, set(wanted)
        if not wants_handoffs(self.view, self.held, self.load):
            # the worker's rule: a stream released since the last round is left to its handoff
            wanted = [s for s in wanted if s in seen]
        self.world.rng.shuffle(wanted)
        for stream in wanted[:room]:
            self.acquire(stream, _ignore_bool)

    def acquire(self, s: int, then: Callable[[bool], None]) -> None:
        """Try to take free stream ``s`` (the worker's :meth:`Acquirer.try_acquire`)."""
        self._acquires.submit(self._acquire_request, self._acquired, (s, then))

    def _acquire_request(self, item: tuple[int, Callable[[bool], None]]) -> Request | None:
        session = self.session
        if not self.may_acquire() or session is None or self.held >= self.capacity:
            return None
        self.reserved += 1
        world, s = self.world, item[0]
        touches = world.write_touches(world.units.acquire, s, None, session.sid)
        return Request(
            touches, [world.stream_touch(s, 1)], self._free_now, self._attach, (s, session)
        )

    def _free_now(self, arg: tuple[int, Session]) -> bool:
        return self.world.owner[arg[0]] == -1

    def _attach(self, arg: tuple[int, Session]) -> None:
        world = self.world
        s, session = arg
        world.owner[s] = session.no
        world.acquired_at[s] = world.sim.now
        since = world.released_at.pop(s, None)
        if since is not None:
            world.handoff_gaps.append((world.sim.now, world.sim.now - since))
        session.held.add(s)
        world.free.discard(s)
        if self.alive and session.live:
            world.add_unowned(-1)

    def _acquired(self, item: tuple[int, Callable[[bool], None]], answer: Answer | None) -> None:
        if answer is not None:
            self.reserved -= 1
        if answer is Answer.OK:
            self.connected_later(item[0])
        item[1](answer is Answer.OK)

    def connected_later(self, s: int) -> None:
        """The holder's connection state, written by the worker's one writer a moment later."""
        if not self._connected:
            self.world.sim.after(CONNECT_SECONDS, self._write_connected)
        self._connected.append(s)

    def _write_connected(self) -> None:
        world, session = self.world, self.session
        pending, self._connected = self._connected, []
        if not self.alive or session is None:
            return
        requests = [
            Request(world.write_touches(world.units.connection, s, None, session.sid), [])
            for s in pending
            if world.owner[s] == session.no
        ]
        if requests:
            world.send(requests)

    def release(self, s: int, *, rebalance: bool, then: Callable[[], None]) -> None:
        """Release held stream ``s`` (final checkpoint, owner cleared), then a handoff."""
        self._releases.submit(self._release_request, self._released, (s, rebalance, then))

    def _release_request(self, item: tuple[int, bool, Callable[[], None]]) -> Request | None:
        session = self.session
        if session is None:
            return None
        world, s = self.world, item[0]
        touches = world.write_touches(world.units.release, s, session.sid, None)
        return Request(touches, [world.stream_touch(s, 1)], self._mine, self._detach, (s, session))

    def _mine(self, arg: tuple[int, Session]) -> bool:
        return self.world.owner[arg[0]] == arg[1].no

    def _detach(self, arg: tuple[int, Session]) -> None:
        world = self.world
        s, session = arg
        world.owner[s] = -1
        world.released_at[s] = world.sim.now
        session.held.discard(s)
        world.free.add(s)
        world.add_unowned(1)

    def _released(self, item: tuple[int, bool, Callable[[], None]], answer: Answer | None) -> None:
        if answer is Answer.OK:
            self.world.send_handoff(item[0], rebalance=item[1])
        item[2]()

    def poll(self) -> None:
        """The command poller: receive while not above the share and below capacity."""
        world = self.world
        if not self.alive or self.draining:
            return
        now = world.sim.now
        if now < self.paused_until:
            world.sim.at(self.paused_until, self.poll)
        elif not (self.may_acquire() and self.may_take_more()):
            world.sim.after(IDLE_CHECK_SECONDS, self.poll)
        elif world.queue:
            self.receive()
        else:
            world.waiting.append(self)

    def receive(self) -> None:
        """A long poll answered: handle up to :func:`receive_count` commands."""
        world = self.world
        if not self.alive or self.draining:
            if world.queue and world.waiting:
                world.waiting.pop(world.rng.randrange(len(world.waiting))).receive()
            return
        count = receive_count(self.view.taking_share, self.held, max(0, self.capacity - self.held))
        batch = []
        while world.queue and len(batch) < min(count, MAX_MESSAGES_PER_RECEIVE):
            batch.append(world.queue.popleft())
        if not batch:
            world.waiting.append(self)
            return
        left = [len(batch)]

        def handled(_: bool = False) -> None:
            left[0] -= 1
            if left[0] == 0:
                self.poll()

        for s, rebalance, received in batch:
            if rebalance and not self.wants_handoffs() and received + 1 < PASS_ON_LIMIT:
                world.queue.append((s, rebalance, received + 1))  # passed on, below its share
                self.paused_until = world.sim.now + PASS_ON_PAUSE_SECONDS
                handled()
            elif rebalance:
                wait, self.next_take = placement.take_delay(self.next_take, world.sim.now)
                world.sim.after(wait, lambda x=s: self.acquire(x, handled))
            else:
                self.acquire(s, handled)

    # --- rebalance and drain ---------------------------------------------------------------

    def _rebalance(self) -> None:
        world, s = self.world, self.world.settings
        if not self.alive or self.draining:
            return
        world.sim.after(jittered(s.rebalance_seconds, world.rng.random()), self._rebalance)
        session = self.session
        if session is None:
            return
        cap = placement.round_cap(self.capacity, s.shed_batch)
        my_load, rate, fleet = self.load, world.rate, self.view.load
        if fleet is not None and my_load is not None and rate is not None:
            mine, surplus = my_load - fleet.mean, fleet.surplus
        else:
            mine, surplus = float(len(session.held) - self.view.share), float(self.view.surplus)
        unpaced = cap
        cap = placement.paced_cap(cap, mine, surplus, s.rebalance_seconds, world.moves_per_second)
        count = placement.count_to_shed(
            len(session.held),
            self.view.share,
            placement.giver_slack(s.rebalance_slack, self.view.shedding),
            self.view.deficit,
            self.view.surplus,
            cap,
        )
        by_load = fleet is not None and my_load is not None and rate is not None
        if not by_load and count <= 0:
            self.view.shed_idle_rounds = placement.shed_rounds_idle(self.view.shed_idle_rounds, 0)
            return
        now = world.sim.now
        eligible = [
            x
            for x in session.held
            if rules.may_shed(world.acquired_at[x], now, s.min_tenure_seconds)
        ]
        if fleet is not None and my_load is not None and rate is not None:
            chosen = [
                int(x)
                for x in placement.choose_by_load(
                    [(str(x), rate[x]) for x in eligible], my_load, fleet, cap
                )
            ]
        else:
            chosen = world.rng.sample(eligible, min(count, len(eligible)))
        self.view.shed_idle_rounds = placement.shed_rounds_idle(
            self.view.shed_idle_rounds, len(chosen)
        )
        spacing = placement.shed_spacing_seconds(
            len(chosen), s.rebalance_seconds, paced=cap < unpaced
        )
        for n, stream in enumerate(chosen):
            world.sim.after(n * spacing, lambda x=stream: self._shed(x))

    def _shed(self, stream: int) -> None:
        session = self.session
        if self.alive and not self.draining and session is not None and stream in session.held:
            self.release(stream, rebalance=True, then=_nothing)

    def drain(self) -> None:
        """SIGTERM: mark DRAINING, release every stream with a handoff, revoke the session."""
        world = self.world
        session = self.session
        if not self.alive or self.draining or session is None:
            return
        self.draining = True
        if self in world.waiting:
            world.waiting.remove(self)
        if world.digest.writer is self:  # hands the digest over: claimable at once
            world.digest.writer, world.digest.expires_at = None, -math.inf

        def mark() -> None:
            if session.live:
                session.state = WorkerState.DRAINING

        world.write(
            self._item_writes(session, {"table": 1.0, "fleet": 1.0}),
            [],
            lambda: True,
            mark,
            None,
        )
        left = [len(session.held)]

        def released() -> None:
            left[0] -= 1
            if left[0] == 0:
                self._revoke(session)

        if not left[0]:
            self._revoke(session)
        for stream in list(session.held):
            self.release(stream, rebalance=False, then=released)

    def _revoke(self, session: Session) -> None:
        world = self.world

        def expire() -> None:
            session.state = WorkerState.EXPIRED
            session.expired_at = world.sim.now
            world.add_unowned(len(session.held))  # releases that failed: the fleet sweeps them

        def gone(_: Answer) -> None:
            self.alive = False

        touches = self._item_writes(session, world.units.tombstone)
        world.write(touches, [], lambda: session.live, expire, gone)


def _ignore(_: Answer) -> None:
    return None


def _ignore_bool(_: bool) -> None:
    return None


def _nothing() -> None:
    return None
