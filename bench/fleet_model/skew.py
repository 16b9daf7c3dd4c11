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
from dataclasses import dataclass
from typing import Final

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


def max_over_mean(world: World) -> float:
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
