"""The placement section: three local workers place streams and balance what they cost.

- **Start.** Three workers; 100 streams created at once. At the end of each lease (the run's
  scaled lease) after the last create call returned, how many each worker holds, and the first
  lease at which every worker holds its share ± 10 %.
- **Skew.** Three workers; a few streams at 100 msg/s and the rest at 1 msg/s, created at once.
  Once the fleet has settled (no move for three rebalance rounds), each worker's CPU (user +
  system from ``/proc``, over a window) and the load it published on its session item; max /
  mean of each.

Both runs end with the invariant checker over everything delivered: every move a handoff, no
gap, no message delivered twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Final

from bench.common import Table, timers_label
from bench.context import SESSIONS, BenchContext
from bench.failover_rounds import round_timeout
from bench.rebalance import _settle
from bench.worker_scale import cpu_seconds
from local.testbed import Testbed
from streamlease import aws
from streamlease.rules import fair_share
from streamlease.session_store import SessionStore

WORKERS: Final = 3
START_STREAMS: Final = 100
START_LEASES: Final = 6
"""The start run follows the counts for this many leases."""
WITHIN: Final = 0.10
"""Every worker within its share ± this fraction."""
HEAVY_RATE: Final = 100.0
LIGHT_RATE: Final = 1.0
CPU_WINDOW_SECONDS: Final = 20.0


@dataclass
class Start:
    """The start run: held counts at the end of each lease, and the lease they met the goal."""

    held: list[list[int]] = field(default_factory=list)
    within_at: int | None = None
    """The first lease at whose end every worker held its share ± 10 % (None: not by the end)."""
    violations: list[str] = field(default_factory=list)


@dataclass
class Skew:
    """The skewed run once settled: per worker CPU (share of one core) and published load."""

    heavy: int
    light: int
    cpu: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    heavy_held: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    moves: int = 0
    violations: list[str] = field(default_factory=list)


def max_over_mean(values: list[float]) -> float | None:
    """max / mean, or None when there is nothing to divide."""
    mean = sum(values) / len(values) if values else 0.0
    return None if mean <= 0 else max(values) / mean


def _within(held: list[int], streams: int) -> bool:
    share = streams / len(held)
    return all(abs(n - share) <= WITHIN * share for n in held)


def _counts(bed: Testbed) -> list[int]:
    holdings = bed.holdings()
    return sorted((len(holdings.get(w.worker_id, ())) for w in bed.workers), reverse=True)


def measure_start(ctx: BenchContext, streams: int) -> Start:
    settings = ctx.settings(SESSIONS)
    out = Start()
    with ctx.testbed("placement-start", settings, rate=LIGHT_RATE) as bed:
        for _ in range(WORKERS):
            bed.add_worker()
        bed.wait_workers_live(WORKERS, round_timeout(settings))
        ids = bed.create_streams(streams)
        created = time.monotonic()  # the API's calls wait their turn at the one moto server
        for lease in range(1, START_LEASES + 1):
            ctx.progress.update(f"placement: {streams} streams, lease {lease}", force=True)
            time.sleep(max(0.0, created + lease * settings.lease_seconds - time.monotonic()))
            held = _counts(bed)
            out.held.append(held)
            if out.within_at is None and sum(held) == streams and _within(held, streams):
                out.within_at = lease
        bed.wait_all_owned(ids, round_timeout(settings))
        out.violations = bed.report().violations()
    return out


def measure_skew(ctx: BenchContext, heavy: int, light: int) -> Skew:
    settings = ctx.settings(SESSIONS)
    timeout = round_timeout(settings) + 20 * settings.rebalance_seconds
    out = Skew(heavy, light)
    with ctx.testbed("placement-skew", settings, rate=LIGHT_RATE) as bed:
        for _ in range(WORKERS):
            bed.add_worker()
        bed.wait_workers_live(WORKERS, round_timeout(settings))
        start = time.monotonic()
        heavy_ids = bed.create_streams(heavy, prefix="heavy", rate=HEAVY_RATE)
        ids = heavy_ids + bed.create_streams(light, prefix="light", rate=LIGHT_RATE)
        bed.wait_all_owned(ids, timeout)
        ctx.progress.update("placement: skewed mix settling", force=True)
        time.sleep(settings.min_tenure_seconds)  # a move first waits out the tenure
        _settle(bed, settings, start, timeout)
        workers = bed.live_workers()
        before = [cpu_seconds(w.pid) for w in workers]
        began = time.monotonic()
        time.sleep(CPU_WINDOW_SECONDS)
        spent = time.monotonic() - began
        out.cpu = [(cpu_seconds(w.pid) - b) / spent for w, b in zip(workers, before, strict=True)]
        sessions = SessionStore(aws.client("dynamodb", settings), settings.table_name)
        loads = sessions.read_loads(w.worker_id for w in workers)
        out.load = [
            (loads[w.worker_id].load_milli or 0) / 1000 if w.worker_id in loads else 0.0
            for w in workers
        ]
        holdings = bed.holdings()
        out.heavy_held = [len(holdings.get(w.worker_id, set()) & set(heavy_ids)) for w in workers]
        out.held = [len(holdings.get(w.worker_id, set())) for w in workers]
        report = bed.report()
        out.moves = len(report.takeovers)
        out.violations = report.violations()
    return out


def run(ctx: BenchContext) -> list[Table]:
    """The placement section (sessions)."""
    streams = 30 if ctx.quick else START_STREAMS
    heavy, light = (2, 10) if ctx.quick else (3, 57)
    start = measure_start(ctx, streams)
    skew = measure_skew(ctx, heavy, light)
    timers = f"{timers_label(ctx.scale)}, lease {ctx.lease_seconds:g} s"

    counts = Table(
        f"Placement: {streams} streams started at once on {WORKERS} workers ({timers})",
        ["after lease", "held (most → fewest)", f"every worker within share ± {WITHIN:.0%}"],
    )
    for lease, held in enumerate(start.held, 1):
        counts.add(lease, " / ".join(map(str, held)), "yes" if _within(held, streams) else "no")
    counts.notes += [
        f"Share {fair_share(streams, WORKERS)}; within ± {WITHIN:.0%} from lease"
        f" {start.within_at if start.within_at is not None else f'> {START_LEASES}'} (goal ≤ 3).",
        f"Invariants over the run: {'; '.join(start.violations) or 'none broken'}.",
    ]

    cpu_ratio, load_ratio = max_over_mean(skew.cpu), max_over_mean(skew.load)
    mix = Table(
        f"Placement by load: {heavy} streams at {HEAVY_RATE:g} msg/s and {light} at"
        f" {LIGHT_RATE:g} msg/s on {WORKERS} workers, settled ({timers})",
        ["worker", "CPU (share of a core)", "published load (units/s)", "streams", "heavy ones"],
    )
    rows = zip(skew.cpu, skew.load, skew.held, skew.heavy_held, strict=True)
    for n, (cpu, load, held, heavy_held) in enumerate(rows):
        mix.add(n + 1, round(cpu, 3), round(load, 1), held, heavy_held)
    mix.notes += [
        f"CPU max / mean {cpu_ratio:.2f} (goal ≤ 1.3); published load max / mean {load_ratio:.2f}."
        if cpu_ratio is not None and load_ratio is not None
        else "No CPU or load measured.",
        f"CPU over {CPU_WINDOW_SECONDS:g} s of /proc user + system time once no stream had moved"
        " for three rebalance rounds; it includes each worker's fixed cost (renewals, fleet"
        " reads), which the streams' cost sits on top of.",
        f"Handoffs over the run: {skew.moves}; invariants:"
        f" {'; '.join(skew.violations) or 'none broken (no gap, nothing delivered twice)'}.",
    ]
    return [counts, mix]
