"""A simulated worker's tombstones and sweeps of dead sessions (the worker's
:mod:`worker.liveness.takeover`): the winner of a tombstone lists the session's streams in
``by-owner`` until it reads none twice, takes each while it has room under its share and frees the
rest with a handoff; any worker sweeps an EXPIRED session it has seen for a heartbeat.

A sweep sends its steps :data:`~worker.liveness.takeover.PARALLEL_STEPS` at a time, each batch one
round trip (the worker's semaphore of that width).
"""

from __future__ import annotations

from bench.fleet_model.agents import Agent
from bench.fleet_model.events import Answer, Request
from bench.fleet_model.sessions import Session
from bench.fleet_model.units import read_units
from streamlease import rules
from streamlease.schema import WorkerState
from worker.liveness.takeover import (
    EMPTY_READS,
    KEEP_TOMBSTONE_LEASES,
    MAX_ROUNDS,
    PARALLEL_STEPS,
    REREAD_SECONDS,
)


class Takeover:
    """Tombstones and sweeps of one agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.world = agent.world
        self._busy: set[int] = set()

    def busy_with(self, no: int) -> bool:
        """A sweep of session ``no`` runs here."""
        return no in self._busy

    def expire(self, target: Session, seen_hb: int, weight: float) -> None:
        """Tombstone ``target`` if its ``hb`` is still ``seen_hb``; the winner sweeps it.
        ``weight``: observers this attempt stands for (their failed attempts load the item)."""
        world = self.world
        item = f"WORKER#{target.sid}"
        table = world.units.renewal_table_units(len(target.held))
        touches = [world.key_touch(item, table, write=True)]
        touches += [
            world.fleet_touch(u, write=True)
            for k, u in world.units.tombstone.items()
            if k == "fleet"
        ]
        conflict = [world.key_touch(item, table, write=True)]

        def holds() -> bool:
            return target.live and target.hb == seen_hb

        def tombstone() -> None:
            target.state = WorkerState.EXPIRED
            target.expired_at = world.sim.now
            holder = target.agent
            if holder.alive and holder.session is target:
                world.add_unowned(len(target.held))  # its holder fences itself

        def answered(answer: Answer) -> None:
            if answer is Answer.OK and self.agent.alive:
                self.sweep(target)

        world.write(touches, conflict, holds, tombstone, answered)
        if weight > 1:  # the other observers' attempts, all losing to this one or a renewal
            world.store.attempt(world.sim.now, conflict, weight - 1)

    def sweep_leftover(self, target: Session, weight: float) -> None:
        """Read the tombstone (consistently, with its vector), then sweep it."""
        world = self.world
        units = world.units.renewal_table_units(len(target.held)) / 2  # 1 KB writes, 4 KB reads
        touch = world.key_touch(f"WORKER#{target.sid}", max(1.0, units), write=False)

        def answered(answer: Answer) -> None:
            if answer is Answer.OK and self.agent.alive:
                self.sweep(target, weight)

        world.read([touch], answered, weight=weight)

    def sweep(self, target: Session, weight: float = 1.0) -> None:
        """Take or free every stream still attached to ``target``."""
        if target.no not in self._busy:
            self._busy.add(target.no)
            _Sweep(self, target, weight).read_round()

    def finished(self, target: Session, clean: bool) -> None:
        """A sweep ended; a clean one deletes the tombstone once it is old enough."""
        self._busy.discard(target.no)
        world = self.world
        keep = KEEP_TOMBSTONE_LEASES * world.settings.lease_seconds
        if not clean or world.sim.now - target.expired_at < keep:
            return
        touches = [
            world.key_touch(f"WORKER#{target.sid}", 1.0, write=True),
            world.fleet_touch(1.0, write=True),
        ]

        def gone() -> None:
            world.fleet.delete(target)

        world.write(touches, [touches[0]], lambda: target.state is WorkerState.EXPIRED, gone, None)


class _Sweep:
    """One sweep of one dead session."""

    def __init__(self, takeover: Takeover, target: Session, weight: float) -> None:
        self.settled = self.paused = False
        self.takeover = takeover
        self.agent = takeover.agent
        self.world = takeover.world
        self.target = target
        self.weight = weight
        self.empty = 0
        self.rounds = 0
        self.todo: list[int] = []
        self.took: list[bool] = []

    def read_round(self) -> None:
        world, target = self.world, self.target
        self.rounds += 1
        if not self.agent.alive or self.rounds > MAX_ROUNDS:
            self.takeover.finished(target, False)
            return
        listed: list[int] = []
        units = read_units(len(target.held) * world.units.owner_entry_bytes)

        def answered(answer: Answer) -> None:
            if answer is not Answer.OK:
                self.takeover.finished(target, False)
            elif not listed:
                self.empty += 1
                if self.empty >= EMPTY_READS:
                    self.takeover.finished(target, True)
                else:
                    world.sim.after(REREAD_SECONDS, self.read_round)
            else:
                self.empty = 0
                world.rng.shuffle(listed)
                self.todo = listed
                if not self.settled and self._settles() and self._room() < len(listed):
                    # The worker's settle: in a large fleet, wait once for a fresher share.
                    self.settled = self.paused = True
                    world.sim.after(
                        world.design.settle_seconds, self.agent.watch.refresh_share, self._resume
                    )
                else:
                    self._next()

        touch = world.owner_touch(target.sid, units, write=False)
        world.write(
            [touch], [], None, lambda: listed.extend(target.held), answered, weight=self.weight
        )

    def _theirs(self, s: int) -> bool:
        return self.world.owner[s] == self.target.no

    def _next(self) -> None:
        """The next :data:`PARALLEL_STEPS` streams: taken while there is room, else freed
        (in a large fleet after waiting once for the share: the worker's ``settle``)."""
        if self.paused:
            return
        world, agent = self.world, self.agent
        requests: list[Request] = []
        took: list[bool] = []
        while self.todo and len(requests) < PARALLEL_STEPS:
            s = self.todo[-1]
            if not self._theirs(s):
                self.todo.pop()
                continue
            mine = agent.session
            if mine is not None and self._has_room():
                self.todo.pop()
                agent.reserved += 1
                touches = world.write_touches(world.units.take_from, s, self.target.sid, mine.sid)
                requests.append(
                    Request(touches, [world.stream_touch(s, 1)], self._theirs, self._move, s)
                )
                took.append(True)
            else:
                self.todo.pop()
                requests.append(self._free_request(s))
                took.append(False)
        if requests:
            world.send(requests, lambda answers: self._answered(requests, took, answers))
        elif not self.paused:
            self.read_round()

    def _resume(self) -> None:
        self.paused = False
        self._next()

    def _answered(self, requests: list[Request], took: list[bool], answers: list[Answer]) -> None:
        world, agent = self.world, self.agent
        retry = []
        for request, taking, answer in zip(requests, took, answers, strict=True):
            s = request.arg
            if taking:
                agent.reserved -= 1
                if answer is Answer.OK:
                    agent.connected_later(s)
                elif answer is Answer.THROTTLED:
                    retry.append(s)  # the worker goes on to free it
            elif answer is Answer.OK:
                world.send_handoff(s)
        if retry:
            requests = [self._free_request(s) for s in retry if self._theirs(s)]
            world.send(requests, lambda answers: self._freed(requests, answers))
        else:
            self._next()

    def _freed(self, requests: list[Request], answers: list[Answer]) -> None:
        for request, answer in zip(requests, answers, strict=True):
            if answer is Answer.OK:
                self.world.send_handoff(request.arg)
        self._next()

    def _settles(self) -> bool:
        """A worker that reads a window and the digest waits (not the digest's writer, not a
        small fleet's worker: their share is fresh)."""
        world = self.world
        return (
            world.design.settle_seconds > 0
            and len(world.fleet) > rules.FULL_READ_MAX_SESSIONS
            and world.digest.writer is not self.agent
        )

    def _room(self) -> int:
        agent = self.agent
        return max(0, min(agent.capacity, max(1, agent.view.share)) - agent.held)

    def _has_room(self) -> bool:
        return self.agent.may_acquire() and self._room() > 0

    def _move(self, s: int) -> None:
        world, agent = self.world, self.agent
        mine = agent.session
        assert mine is not None
        world.owner[s] = mine.no
        world.acquired_at[s] = world.sim.now
        self.target.held.discard(s)
        mine.held.add(s)
        if agent.alive and mine.live:
            world.add_unowned(-1)

    def _free(self, s: int) -> None:
        world = self.world
        world.owner[s] = -1
        self.target.held.discard(s)
        world.free.add(s)

    def _free_request(self, s: int) -> Request:
        world = self.world
        touches = world.write_touches(world.units.release_for, s, self.target.sid, None)
        return Request(touches, [world.stream_touch(s, 1)], self._theirs, self._free, s)
