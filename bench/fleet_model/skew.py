"""Skewed stream rates: balance by load against balance by counts (architecture §10).

Streams get rates from a Zipf law over 0.1 to 100 load units per second (a few heavy feeds,
many light ones), spread over the workers by counts, as the count rule leaves them. The fleet
then runs with load figures: the rebalancer hands off by load
(:func:`streamlease.placement.choose_by_load`), receivers take below the mean. Measured: the
busiest worker's load over the mean, before (counts) and after a few leases (load); how many
streams moved, and whether any was ever left unowned longer than a handoff takes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from bench.common import Table
from bench.fleet_model.agents import Agent
from bench.fleet_model.scenarios import Size, build
from bench.fleet_model.world import Design, World

RATE_MAX: Final = 100.0
RATE_MIN: Final = 0.1
SKEW_LEASES: Final = 8.0
"""How long the fleet runs with load figures before the steady figure is read."""


@dataclass(frozen=True)
class SkewOutcome:
    """Max / mean worker load by counts and by load, and what it cost."""

    size: Size
    by_counts: float
    by_load: float
    settled_leases: float | None
    """When the max / mean first came within 1.2 (None: not within the run)."""
    moves: int
    peak_unowned: int


def zipf_rates(streams: int, seed_rank: list[int]) -> list[float]:
    """Rates by rank: ``RATE_MAX / rank^a``, ``a`` chosen so the last rank gets ``RATE_MIN``;
    ``seed_rank`` is a permutation of the streams (which stream gets which rank)."""
    exponent = math.log(RATE_MAX / RATE_MIN) / math.log(max(2, streams))
    return [max(RATE_MIN, RATE_MAX / (seed_rank[s] + 1) ** exponent) for s in range(streams)]


def max_over_mean(world: World[Agent]) -> float:
    """The busiest live worker's load over the mean."""
    loads = [a.load or 0.0 for a in world.live_agents()]
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0


def run(design: Design, size: Size, *, seed: int = 1) -> SkewOutcome:
    """Play the fleet with Zipf rates for :data:`SKEW_LEASES` leases."""
    world = build(design, size, seed)
    ranks = list(range(size.streams))
    world.rng.shuffle(ranks)
    world.rate = zipf_rates(size.streams, ranks)
    for agent in world.agents:
        if agent.session is not None:
            agent.session.load = agent.load
    by_counts = max_over_mean(world)
    owners = list(world.owner)
    lease = world.settings.lease_seconds
    settled = None
    for step in range(1, int(SKEW_LEASES * 4) + 1):
        world.sim.run(step * lease / 4)
        if settled is None and max_over_mean(world) <= 1.2:
            settled = step / 4
    moves = sum(1 for a, b in zip(owners, world.owner, strict=True) if a != b)
    return SkewOutcome(
        size,
        by_counts,
        max_over_mean(world),
        settled,
        moves,
        max((n for _, n in world.unowned_series), default=0),
    )


SKEW_SIZES: Final = (Size(10, 100), Size(10, 1000))
SKEW_GOAL: Final = 1.2


def skew_table(outcomes: Sequence[SkewOutcome]) -> Table:
    """Max / mean worker load with Zipf rates: as counts leave it, and after the load rule."""
    table = Table(
        f"Fleet model: skewed stream rates (Zipf over {RATE_MIN:g}–{RATE_MAX:g} load units/s),"
        f" max / mean worker load after {SKEW_LEASES:g} leases",
        [
            "fleet",
            "by counts",
            "by load",
            f"within {SKEW_GOAL} after",
            "streams moved",
            "unowned at most",
        ],
    )
    for o in outcomes:
        table.add(
            o.size.label(),
            f"{o.by_counts:.2f}",
            f"{o.by_load:.2f}",
            "—" if o.settled_leases is None else f"{o.settled_leases:g} leases",
            o.moves,
            o.peak_unowned,
        )
    table.notes.append(
        "The streams start spread by counts (what the count rule leaves); then every worker"
        " publishes its load and the rebalancer hands off by load. At 10 × 100 one 100/s"
        " stream can outweigh a worker's mean, which no placement fixes."
    )
    return table
