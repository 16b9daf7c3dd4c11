"""``python -m bench.fleet_model.study``: one scale-out (+25 % workers) of the flat design under
other budgets and rules than the worker's, to weigh a change before building it.

The fleet, its clock and its rules are the bench section's (:mod:`bench.fleet_model.scenarios`);
what can be changed:

- ``--shards``: the orphan index's partition key values (the worker writes
  :data:`~streamlease.indexes.INDEX_SHARDS`); the pace follows them unless ``--moves-per-second``
  sets the fleet's handoff budget outright;
- ``--offer-handoffs``: acquires and releases leave the orphan index out, what a handoff that
  names no orphan entry would cost (the giver keeps its ownership marked offered, the taker
  conditions on it: table 1 + ``by-holder`` 1 each, as now; a scale-out has no other acquire
  or release);
- ``--rebalance-seconds``, ``--slack`` (the workers' ``rebalance_slack``; the convergence test
  keeps the default's), ``--digest-read-rounds``;
- ``--partitions``: of the table and of each index (a table pre-warmed for that many thousand
  write units a second; default the bench section's,
  :func:`~bench.fleet_model.scenarios.partitions_for`).

Request units: :data:`~bench.fleet_model.units.NOMINAL_UNITS` with the connection-state write's
``by-holder`` unit, the moto-measured flat layout's shape (``bench/results/fleet_model.md``), so
no moto server is needed. Prints one markdown row: leases until every worker holds at most its
share + the default slack, streams unowned at most, throttled attempts, and the busiest
partition-second of each component over the event; with ``--steady``, the rebalance handoffs
of a steady minute instead (churn).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Final

from bench.fleet_model.scenarios import (
    CAPACITY_HEADROOM,
    EVENT_WARMUP_SECONDS,
    SCALE_OUT_FRACTION,
    STEADY_SECONDS,
    WARMUP_SECONDS,
    Size,
    _add_agent,
    _observes,
    build,
)
from bench.fleet_model.units import NOMINAL_UNITS
from bench.fleet_model.world import Design
from streamlease import rules
from streamlease.indexes import INDEX_SHARDS
from streamlease.settings import Settings
from worker.liveness.fleet import DIGEST_READ_ROUNDS, SETTLE_ROUNDS

COMPONENTS: Final = ("table", "orphans", "by-owner", "fleet")
STEP_SECONDS: Final = 5.0
"""How often convergence is checked (the bench section's step)."""
CAP_SECONDS: Final = 300.0


def design(args: argparse.Namespace) -> Design:
    """The flat design with the study's changes."""
    units = dataclasses.replace(NOMINAL_UNITS, connection={"table": 1, "by-owner": 1})
    if args.offer_handoffs:
        units = dataclasses.replace(
            units,
            acquire={"table": 1, "by-owner": 1},
            release={"table": 1, "by-owner": 1},
        )
    return Design(
        "flat",
        "flat",
        "orphans",
        args.shards,
        ring_watch=True,
        units=units,
        settle_seconds=SETTLE_ROUNDS * Settings().fleet_recount_seconds,
        moves_per_second=args.moves_per_second,
        digest_read_rounds=args.digest_read_rounds,
    )


def scale_out(args: argparse.Namespace) -> str:
    """Play the scale-out; the markdown row."""
    size = Size(args.workers, args.per_worker)
    settings = Settings(rebalance_seconds=args.rebalance_seconds, rebalance_slack=args.slack)
    world = build(design(args), size, args.seed, settings, args.partitions)
    world.sim.run(EVENT_WARMUP_SECONDS)
    start = world.sim.now
    capacity = math.ceil(CAPACITY_HEADROOM * size.per_worker)
    for _ in range(max(1, round(size.workers * SCALE_OUT_FRACTION))):
        _add_agent(world, capacity, observer=_observes(world)).boot(fresh=True)
    slack = Settings().rebalance_slack
    took = None
    while world.sim.now < start + CAP_SECONDS:
        world.sim.run(world.sim.now + STEP_SECONDS)
        live = world.live_agents()
        share = rules.fair_share(len(world.owner), len(live))
        if all(a.held <= share + slack for a in live):
            took = (world.sim.now - start) / settings.lease_seconds
            break
    end = world.sim.now + 1.0
    world.sim.run(end)
    peak = max((n for t, n in world.unowned_series if t >= start), default=0)
    busiest = [f"{world.store.hottest(start, end, [c]).fraction:.0%}" for c in COMPONENTS]
    leases = "not within the cap" if took is None else f"{took:.2f}"
    return (
        f"| {size.label()} | {label(args)} | {leases} | {peak:,} |"
        f" {world.store.throttled(start, end):,.0f} | {' | '.join(busiest)} |"
    )


def steady(args: argparse.Namespace) -> str:
    """A steady minute after :data:`~bench.fleet_model.scenarios.WARMUP_SECONDS` (no event):
    how many rebalance handoffs the fleet sent in it, a row of its own."""
    size = Size(args.workers, args.per_worker)
    settings = Settings(rebalance_seconds=args.rebalance_seconds, rebalance_slack=args.slack)
    world = build(design(args), size, args.seed, settings, args.partitions)
    end = WARMUP_SECONDS + STEADY_SECONDS
    world.sim.run(end)
    moved = sum(1 for t in world.rebalance_handoffs if t >= WARMUP_SECONDS)
    return f"| {size.label()} | {label(args)} | steady minute: {moved:,} rebalance handoffs |"


def label(args: argparse.Namespace) -> str:
    """What this run changed, in words."""
    parts = [f"{args.shards} shards"]
    if args.offer_handoffs:
        parts.append("offer handoffs")
    if args.moves_per_second is not None:
        parts.append(f"budget {args.moves_per_second:,.0f} moves/s")
    if args.rebalance_seconds != Settings().rebalance_seconds:
        parts.append(f"rounds {args.rebalance_seconds:g} s")
    if args.slack != Settings().rebalance_slack:
        parts.append(f"worker slack {args.slack}")
    if args.partitions is not None:
        parts.append(f"{args.partitions} partitions")
    if args.digest_read_rounds != DIGEST_READ_ROUNDS:
        parts.append(f"digest every {args.digest_read_rounds} s")
    return ", ".join(parts)


HEADER: Final = (
    "| fleet | variant | leases | unowned at most | throttled |"
    f" {' | '.join(f'busiest {c} writes' for c in COMPONENTS)} |"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, play, print the row (after the table's header with ``--header``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_model.study", description=__doc__)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--per-worker", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=INDEX_SHARDS)
    parser.add_argument("--moves-per-second", type=float, default=None)
    parser.add_argument("--offer-handoffs", action="store_true")
    parser.add_argument("--rebalance-seconds", type=float, default=Settings().rebalance_seconds)
    parser.add_argument("--slack", type=int, default=Settings().rebalance_slack)
    parser.add_argument("--digest-read-rounds", type=int, default=DIGEST_READ_ROUNDS)
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--header", action="store_true")
    parser.add_argument("--steady", action="store_true", help="a steady minute instead")
    args = parser.parse_args(argv)
    if args.header:
        print(HEADER)
        print("|---|---|" + "---:|" * (3 + len(COMPONENTS)))
    print(steady(args) if args.steady else scale_out(args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
