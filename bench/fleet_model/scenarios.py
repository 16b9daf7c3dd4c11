"""The fleets and events the model plays, and what it measures in each.

Every run starts from a fleet that has run for a while (every stream held, timers at random
phases), measures a steady window, then (but for ``steady``) plays one event and follows it
until every stream is owned again:

- ``kill``: one worker killed (kill -9);
- ``az``: an availability zone lost: every third worker killed at once;
- ``deploy``: a rolling deploy in waves of a tenth of the fleet: new tasks start, then as many
  old ones drain (SIGTERM); the next wave once every stream is owned again (three waves);
- ``scale_out``: a quarter more workers start; the rebalancer moves streams to them.

Measured: DynamoDB cost per stream-hour in the steady window (the auditor's minute included),
the busiest partition-second (offered load against its limit), throttled requests, and for each
event the time until every stream is owned again (in leases), its throttles and busiest
partition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from bench.fleet_model.agents import Agent
from bench.fleet_model.auditor import Auditor
from bench.fleet_model.store import Load
from bench.fleet_model.takeover import Takeover
from bench.fleet_model.watch import Watch, copy_view, whole_fleet_view
from bench.fleet_model.world import Design, World
from streamlease import rules
from streamlease.placement import PARTITION_WRITE_UNITS
from streamlease.settings import Settings

SCENARIOS: Final = ("steady", "kill", "az", "deploy", "scale_out")
WARMUP_SECONDS: Final = 30.0
STEADY_SECONDS: Final = 60.0
EVENT_WARMUP_SECONDS: Final = 10.0
"""Before an event (the fleet boots with its timers at random phases already)."""
NEW_TASK_SECONDS: Final = 5.0
"""A rolling deploy waits this long for a wave's new tasks before it stops old ones."""
CAPACITY_HEADROOM: Final = 1.6
"""A worker's capacity over the streams it holds: a fleet that loses a third of its workers
needs 1.5×, architecture §7's headroom with a task lost."""
OBSERVERS: Final = 32
"""Today's design: workers that run a dead-session detector of their own (the others only load
the store); see :mod:`bench.fleet_model.watch`."""
TABLE_PARTITIONS: Final = 40
INDEX_PARTITIONS: Final = 40
"""Partitions of the table and of each index: 40,000 write units per second of either, what
an on-demand table pre-warmed to its default quota (40,000 units per second) gets."""
PREWARM_UNITS_PER_STREAM: Final = 0.08
"""A large fleet's table is pre-warmed for this many write units a second per stream, when
that is above the default quota: 80,000 for a million streams (the quota raised), so that a
scale-out's handoffs, paced at a quarter of it
(:func:`streamlease.placement.fleet_moves_per_second`), move a fifth of the streams within two
leases."""


def partitions_for(size: Size) -> int:
    """Partitions of the table and of each index for a fleet of ``size``: 40, or what its
    pre-warm (:data:`PREWARM_UNITS_PER_STREAM`) asks for, whichever is more."""
    units = size.streams * PREWARM_UNITS_PER_STREAM
    return max(TABLE_PARTITIONS, math.ceil(units / PARTITION_WRITE_UNITS))


DEPLOY_WAVES: Final = 3
DEPLOY_WAVE_FRACTION: Final = 0.1
SCALE_OUT_FRACTION: Final = 0.25
PRICE_WRITE: Final = 0.625e-6
PRICE_READ: Final = 0.125e-6
"""USD per write and read request unit, on-demand, us-east-1 (as the write-cost section)."""


@dataclass(frozen=True)
class Size:
    """A fleet: workers and streams per worker."""

    workers: int
    per_worker: int

    @property
    def streams(self) -> int:
        """Streams in all."""
        return self.workers * self.per_worker

    def label(self) -> str:
        """``"1,000 × 1,000"``."""
        return f"{self.workers:,} × {self.per_worker:,}"


@dataclass
class Outcome:
    """What one run measured."""

    design: str
    size: Size
    scenario: str
    write_units: float = 0.0
    """Steady window, per stream-hour."""
    read_units: float = 0.0
    micro_dollars: float = 0.0
    """Steady window: µ$ per stream-hour (writes and reads, on demand)."""
    steady_hottest: Load | None = None
    steady_throttled: float = 0.0
    recovery_leases: float | None = None
    """The event: time until every stream is owned again (deploy: the slowest wave; scale-out:
    until no worker is above share + slack); None: not within the cap."""
    projected_leases: float | None = None
    """When not recovered: the time the pace so far projects (inf: no progress)."""
    event_hottest: Load | None = None
    event_throttled: float = 0.0
    event_seconds: float = 0.0
    peak_unowned: int = 0
    longest_handoff: float | None = None
    """Scale-out: the longest any released stream stayed unowned before it was taken again
    (seconds)."""
    extra: dict[str, float] = field(default_factory=dict)


def build(
    design: Design,
    size: Size,
    seed: int,
    settings: Settings | None = None,
    partitions: int | None = None,
) -> World[Agent]:
    """A fleet of ``size`` under ``design`` that has run for a while; ``settings``: the
    workers' (default: the defaults); ``partitions``: of the table and of each index alike
    (default :func:`partitions_for` the size)."""
    settings = Settings() if settings is None else settings
    world: World[Agent] = World(
        design,
        settings,
        streams=size.streams,
        table_partitions=partitions or partitions_for(size),
        index_partitions=partitions or partitions_for(size),
        seed=seed,
    )
    capacity = math.ceil(CAPACITY_HEADROOM * size.per_worker)
    sampled = set(range(size.workers))
    if not design.ring_watch and size.workers > OBSERVERS:
        sampled = set(world.rng.sample(range(size.workers), OBSERVERS))
    for i in range(size.workers):
        _add_agent(world, capacity, observer=i in sampled).boot(fresh=False)
    for s in range(size.streams):
        session = world.agents[s // size.per_worker].session
        assert session is not None
        world.owner[s] = session.no
        session.held.add(s)
        world.acquired_at[s] = -world.rng.uniform(60, 3600)
    for agent in world.agents:
        assert agent.session is not None
        agent.session.active = len(agent.session.held)
    view = whole_fleet_view(world)
    for agent in world.agents:
        copy_view(view, agent.view, world.sim.now)
    if design.ring_watch and size.workers > rules.FULL_READ_MAX_SESSIONS:
        world.digest.writer = world.agents[0]
        world.digest.expires_at = settings.lease_seconds
        world.digest.view = view
    Auditor(world).start()
    return world


def _add_agent(world: World[Agent], capacity: int, *, observer: bool) -> Agent:
    agent = Agent(world, len(world.agents), capacity, observer=observer)
    agent.watch = Watch(agent)
    agent.takeover = Takeover(agent)
    world.agents.append(agent)
    return agent


def _observes(world: World[Agent]) -> bool:
    """Whether a new worker runs its own detector (always, but in today's sampled fleets)."""
    if world.design.ring_watch:
        return True
    return sum(1 for a in world.agents if a.alive and a.observer) < OBSERVERS


def run(
    design: Design,
    size: Size,
    scenario: str,
    *,
    cap_leases: float,
    seed: int = 1,
    settings: Settings | None = None,
) -> Outcome:
    """Play ``scenario`` on a fresh fleet (see the module docstring); an event is followed for
    at most ``cap_leases`` leases."""
    world = build(design, size, seed, settings)
    out = Outcome(design.key, size, scenario)
    if scenario == "steady":
        end = WARMUP_SECONDS + STEADY_SECONDS
        world.sim.run(end)
        _steady(world, out, WARMUP_SECONDS, end)
        return out
    world.sim.run(EVENT_WARMUP_SECONDS)
    start = world.sim.now
    if scenario in ("kill", "az"):
        victims = world.agents[1::3] if scenario == "az" else world.agents[1:2]
        for agent in victims:
            agent.kill()
        out.recovery_leases, out.projected_leases = follow(world, start, cap_leases)
    elif scenario == "deploy":
        out.recovery_leases, out.projected_leases = _deploy(world, size, cap_leases)
    else:
        out.recovery_leases, out.projected_leases = _scale_out(world, size, cap_leases)
    end = world.sim.now + 1.0
    world.sim.run(end)
    out.event_seconds = end - start
    out.event_hottest = world.store.hottest(start, end)
    out.event_throttled = world.store.throttled(start, end)
    out.peak_unowned = max((n for t, n in world.unowned_series if t >= start), default=0)
    if scenario == "scale_out":
        gaps = [gap for t, gap in world.handoff_gaps if t >= start]
        gaps += [end - since for since in world.released_at.values() if since >= start]
        out.longest_handoff = max(gaps, default=0.0)
    return out


def follow(
    world: World[Agent], start: float, cap_leases: float
) -> tuple[float | None, float | None]:
    """Run until every stream is owned again: ``(leases it took, None)``; or, past
    ``cap_leases`` (or once the pace so far projects beyond it, checked every lease from the
    second on), ``(None, leases projected at that pace)``."""
    lease = world.settings.lease_seconds
    sim = world.sim
    peak = 0
    for n in range(1, math.ceil(cap_leases) + 1):
        sim.run(start + min(n, cap_leases) * lease, stop=lambda: world.unowned == 0)
        peak = max(peak, max((u for t, u in world.unowned_series if t >= start), default=0))
        if world.unowned == 0:
            last = max(t for t, _ in world.unowned_series)
            return max(0.0, last - start) / lease, None
        done = peak - world.unowned
        elapsed = (sim.now - start) / lease
        projected = math.inf if done <= 0 else elapsed * peak / done
        if n >= 2 and projected > cap_leases:
            return None, projected
    return None, None


def _steady(world: World[Agent], out: Outcome, start: float, end: float) -> None:
    hours = (end - start) / 3600 * len(world.owner)
    units = world.store.units(start, end)
    writes = sum(u for (_, write), u in units.items() if write)
    reads = sum(u for (_, write), u in units.items() if not write)
    out.write_units = writes / hours
    out.read_units = reads / hours
    out.micro_dollars = (writes * PRICE_WRITE + reads * PRICE_READ) / hours * 1e6
    out.steady_hottest = world.store.hottest(start, end)
    out.steady_throttled = world.store.throttled(start, end)
    for (component, write), u in units.items():
        out.extra[f"{component} {'w' if write else 'r'}"] = u / hours


def _deploy(
    world: World[Agent], size: Size, cap_leases: float
) -> tuple[float | None, float | None]:
    """Waves of new tasks, then as many old ones drained: the slowest wave, in leases."""
    wave = max(1, round(size.workers * DEPLOY_WAVE_FRACTION))
    capacity = math.ceil(CAPACITY_HEADROOM * size.per_worker)
    old = list(world.agents)
    slowest = 0.0
    for n in range(DEPLOY_WAVES):
        for _ in range(wave):
            _add_agent(world, capacity, observer=_observes(world)).boot(fresh=True)
        world.sim.run(world.sim.now + NEW_TASK_SECONDS)
        start = world.sim.now
        for agent in old[n * wave : (n + 1) * wave]:
            agent.drain()
        took, projected = follow(world, start, cap_leases)
        if took is None:
            return None, projected
        slowest = max(slowest, took)
    return slowest, None


def _scale_out(
    world: World[Agent], size: Size, cap_leases: float
) -> tuple[float | None, float | None]:
    """A quarter more workers: leases until no worker holds more than share + slack; past
    ``cap_leases``, ``(None, leases projected at the pace the excess shrank)``."""
    lease = world.settings.lease_seconds
    capacity = math.ceil(CAPACITY_HEADROOM * size.per_worker)
    start = world.sim.now
    for _ in range(max(1, round(size.workers * SCALE_OUT_FRACTION))):
        _add_agent(world, capacity, observer=_observes(world)).boot(fresh=True)
    slack = world.settings.rebalance_slack

    def excess() -> int:
        live = world.live_agents()
        share = rules.fair_share(len(world.owner), len(live))
        return sum(max(0, a.held - share - slack) for a in live)

    first = excess()
    while world.sim.now < start + cap_leases * lease:
        world.sim.run(world.sim.now + 5.0)
        if excess() == 0:
            return (world.sim.now - start) / lease, None
    moved = first - excess()
    elapsed = (world.sim.now - start) / lease
    return None, (math.inf if moved <= 0 else elapsed * first / moved)
