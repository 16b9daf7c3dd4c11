"""The fleet model section (``python -m bench --only fleet_model``): the lease protocol at fleet
scale, today's design beside the flat one, on a model of DynamoDB's partitions.

A discrete-event simulation of N worker processes (:mod:`bench.fleet_model.agents`) takes its
decisions with the worker's own rules and constants (the dead-session detector, the fair share,
room for orphans, what to shed, the takeover's steps), and sends every request to a store model
that charges capacity units to the partitions they touch and throttles as DynamoDB does
(:mod:`bench.fleet_model.store`). The units per request are measured first on the moto server
with the real stores (:mod:`bench.fleet_model.calibrate`). Nothing runs in other processes and
no timer is scaled: the figures are at production timers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Final

from bench.common import Table
from bench.context import BenchContext
from bench.fleet_model.calibrate import TODAY_ORPHANS, calibrate
from bench.fleet_model.report import goals_table, model_notes, scenario_table, steady_table
from bench.fleet_model.scenarios import SCENARIOS, Outcome, Size
from bench.fleet_model.scenarios import run as play
from bench.fleet_model.skew import SKEW_SIZES, skew_table
from bench.fleet_model.skew import run as play_skew
from bench.fleet_model.world import Design
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY, INDEX_SHARDS, LEGACY_BY_OWNER
from streamlease.settings import Settings
from worker.liveness.fleet import SETTLE_ROUNDS

FULL_SIZES: Final = tuple(Size(w, s) for w in (10, 100, 1000) for s in (100, 1000))
QUICK_SIZES: Final = (Size(10, 100), Size(10, 1000), Size(300, 1000))
QUICK_SCENARIOS: Final = ("steady", "kill", "az")
FULL_CAP_LEASES: Final = 15.0
QUICK_CAP_LEASES: Final = 6.0
SCALE_OUT_CAP_LEASES: Final = 10.0


def designs(ctx: BenchContext) -> tuple[Design, Design]:
    """Today's design and the flat one, with their measured units."""
    units = calibrate(ctx.resources("fleet-model"), {"flat": BY_SHARD_EXPIRY})
    today = Design(
        key="today",
        label="today",
        orphan_index=TODAY_ORPHANS.name,
        orphan_shards=1,
        ring_watch=False,
        units=units["today"],
        owner_index=LEGACY_BY_OWNER.name,
    )
    flat = Design(
        key="flat",
        label="flat",
        orphan_index=BY_SHARD_EXPIRY.name,
        orphan_shards=INDEX_SHARDS,
        ring_watch=True,
        units=units["flat"],
        settle_seconds=SETTLE_ROUNDS * Settings().fleet_recount_seconds,
        owner_index=BY_OWNER.name,
    )
    return today, flat


def run_all(
    plan: Sequence[tuple[Design, Size, str]],
    cap_leases: float,
    progress: Callable[[str], None],
) -> list[Outcome]:
    """Every run of ``plan``, in order (each on a fresh fleet)."""
    out = []
    for n, (design, size, scenario) in enumerate(plan, start=1):
        progress(f"{n}/{len(plan)}: {design.label}, {size.label()}, {scenario}")
        cap = SCALE_OUT_CAP_LEASES if scenario == "scale_out" else cap_leases
        out.append(play(design, size, scenario, cap_leases=min(cap, cap_leases)))
    return out


def run(ctx: BenchContext) -> list[Table]:
    """The section: calibrate, play every fleet and event, tabulate."""
    started = time.monotonic()
    ctx.progress.update("measuring request units on the moto server", force=True)
    today, flat = designs(ctx)
    sizes = QUICK_SIZES if ctx.quick else FULL_SIZES
    scenarios = QUICK_SCENARIOS if ctx.quick else SCENARIOS
    cap = QUICK_CAP_LEASES if ctx.quick else FULL_CAP_LEASES
    plan = [(d, size, sc) for size in sizes for sc in scenarios for d in (today, flat)]
    outcomes = run_all(plan, cap, lambda text: ctx.progress.update(text, force=True))
    skewed = []
    for size in SKEW_SIZES:
        ctx.progress.update(f"skewed rates: {size.label()}", force=True)
        skewed.append(play_skew(flat, size))
    seconds = time.monotonic() - started
    largest = max(sizes, key=lambda s: (s.streams, s.workers))
    small = min((s for s in sizes if s.per_worker == largest.per_worker), key=lambda s: s.workers)
    return [
        goals_table(outcomes, largest, small),
        steady_table(outcomes),
        scenario_table(outcomes, [s for s in scenarios if s != "steady"], cap),
        skew_table(skewed),
        model_notes(today, flat, seconds, math.isclose(cap, QUICK_CAP_LEASES)),
    ]
