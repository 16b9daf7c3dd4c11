"""The failover section: kill -9, kill -9 + reaper, SIGTERM drain, stop and start, for sessions,
per-stream and the reference (seed) preset in one run, with the duplicates each takeover caused.

The rounds are measured by :mod:`bench.failover_rounds`; this module runs them per preset and
prints two tables: every event's distribution (seconds and leases), and the figures the
sessions goal is stated in (leases, heartbeats, one heartbeat of messages, production seconds)
next to each other. Both say the timer scale and the fixed latencies beside it (a DynamoDB round
trip, a worker's start), which do not shrink with the timers: the ratios mean something only
where those are a small part of the lease.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from bench.common import Table, timers_label
from bench.context import PRESET_LABELS, PRESETS, SESSIONS, BenchContext
from bench.failover_rounds import (
    EVENTS,
    GRAY,
    KILL,
    KILL_REAPER,
    RATE,
    REAPER_CALL,
    SIGTERM,
    START,
    STOP,
    STORE_ROUND_TRIP,
    WORKER_START,
    PresetRun,
    measure,
)
from local.worker_process import MIN_FLEET_RECOUNT_SECONDS, PRODUCTION_LEASE_SECONDS
from streamlease.schema import Liveness
from streamlease.settings import Settings
from streamlease.stats import percentile

KILL_GOAL_LEASES: Final = 1.1
"""Sessions: kill -9 → all streams owned again, p99, at most this many leases plus the fleet
re-read interval."""
GRAY_HANDOVER_LEASES: Final = 2.0
"""Ours: a gray failure starts → each of the worker's streams owned by a peer, at most this many
leases (the chaos test asserts only that it happens; this is where the bound is checked)."""
SEED_SIGTERM_P99_LEASES: Final = 0.44
"""The seed's SIGTERM drain, unowned time p99 (leases), which sessions must match or beat."""
FIXED_LATENCY_SHARE: Final = 0.05
"""Fixed latencies under this share of the lease keep the ratios honest."""


def run(ctx: BenchContext) -> list[Table]:
    """The failover section: every preset, every event, side by side."""
    results = {preset: measure(ctx, preset) for preset in PRESETS}
    return [goals_table(ctx, results), events_table(ctx, results)]


def _measured(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _p(values: Sequence[float], p: float) -> float:
    return percentile(_measured(values), p)


def _leases(seconds: float, settings: Settings) -> float:
    return seconds / settings.lease_seconds


def _timers(ctx: BenchContext) -> str:
    lease = ctx.lease_seconds
    return f"{timers_label(ctx.scale)}: lease {lease:g} s, heartbeat {lease / 4:g} s"


def events_table(ctx: BenchContext, results: Mapping[str, PresetRun]) -> Table:
    """Every event's unowned time or latency: p50, p99, max in seconds and leases."""
    table = Table(
        f"Failover and control latency ({_timers(ctx)})",
        ["event", "preset", "n", "p50 s", "p99 s", "max s", "p50 leases", "p99 leases", "max"],
    )
    lease = ctx.lease_seconds
    for event in EVENTS:
        for preset, result in results.items():
            measured = result.samples.get(event, [])
            if not measured:  # an event this preset is not put through
                continue
            values = _measured(measured)
            missed = len(measured) - len(values)
            p50, p99 = percentile(values, 50), percentile(values, 99)
            top = max(values, default=math.nan)
            table.add(
                event,
                PRESET_LABELS[preset],
                f"{len(values)}" + (f" ({missed} never)" if missed else ""),
                p50,
                p99,
                top,
                p50 / lease,
                p99 / lease,
                top / lease,
            )
    timeouts = ", ".join(
        f"{PRESET_LABELS[p]} {r.timeout_seconds:.0f} s" for p, r in results.items()
    )
    passed_over = sum(r.stop_passed_over for r in results.values())
    reaper = ", ".join(
        f"{PRESET_LABELS[p]} {_p(r.samples[REAPER_CALL], 50):.2f} s" for p, r in results.items()
    )
    table.notes += [
        f"Every timer is production's × {ctx.scale:g} (lease 20 s → {lease:g} s, heartbeat 5 s →"
        f" {lease / 4:g} s, reconcile 5 s → {lease / 4:g} s; reference reconcile 60 s →"
        f" {3 * lease:g} s). Seconds × {1 / ctx.scale:g} = production seconds; leases are the"
        " same at any scale.",
        "Presets: sessions = our defaults (liveness=session); per-stream = our defaults with"
        " liveness=stream; reference = the seed design: per-stream, reconcile every 60 s"
        " (scaled), release without a handoff command, no acquire scheduled for leases that"
        " missed heartbeats.",
        "Unowned time: kill → new holder's acquire (kill -9), or old holder's release → new"
        " holder's acquire (SIGTERM); from the workers' lease events on one monotonic clock.",
        "A round waits until every stream of the victim is acquired elsewhere, read from every"
        f" worker's event log; never = not acquired within the round's timeout ({timeouts}).",
        "Gray failure (sessions and per-stream only): every renewal of the busiest worker is"
        " applied 1.5 DynamoDB timeouts late, after its client gave up; unowned time runs from"
        " the first renewal held to a peer's acquisition (the worker is killed afterwards).",
        "kill -9 + reaper: the reaper handler runs in the bench process right after the kill"
        f" (warm; p50 of the call itself: {reaper}); on AWS, EventBridge delivery and a Lambda"
        " invocation come on top.",
    ]
    if passed_over:
        table.notes.append(
            f"stop: {passed_over} stream(s) passed over, released by a rebalance just before"
            " the call (no holder to stop)."
        )
    return table


def _duplicates(result: PresetRun, mode: str) -> str:
    counts = result.duplicates.get(mode, [])
    if not counts:
        return "–"
    return (
        f"{percentile(counts, 50):,.0f} / {percentile(counts, 99):,.0f} / {max(counts):,}"
        f" ({len(counts)} takeovers)"
    )


def goals_table(ctx: BenchContext, results: Mapping[str, PresetRun]) -> Table:
    """The figures the goals are stated in, one column per preset and the sessions goal."""
    presets = list(results)
    table = Table(
        f"Failover against the goals ({_timers(ctx)})",
        ["measure", *(PRESET_LABELS[p] for p in presets), "sessions goal"],
    )
    any_settings = next(iter(results.values())).settings
    heartbeat_messages = RATE * any_settings.heartbeat_seconds
    fleet = any_settings.fleet_recount_seconds
    kill_bound = KILL_GOAL_LEASES + fleet / any_settings.lease_seconds
    sessions = results[SESSIONS]

    def row(label: str, figure: Callable[[PresetRun], str], goal: str = "") -> None:
        table.add(label, *(figure(results[p]) for p in presets), goal)

    def verdict(value: float, bound: float) -> str:
        if math.isnan(value):
            return "no figure"
        return "met" if value <= bound else "not met"

    def kill_p(result: PresetRun, p: float) -> float:
        return _leases(_p(result.samples[KILL], p), result.settings)

    kill_p99 = kill_p(sessions, 99)
    row(
        "kill -9 → all owned again, no reaper: p50 / p99 leases",
        lambda r: f"{kill_p(r, 50):.2f} / {kill_p(r, 99):.2f}",
        f"≤ {KILL_GOAL_LEASES:g} + fleet re-read = {kill_bound:.2f}"
        f" ({verdict(kill_p99, kill_bound)})",
    )
    row(
        "fleet re-read interval (how a dead session is noticed)",
        lambda r: (
            f"{r.settings.fleet_recount_seconds:g} s ="
            f" {_leases(r.settings.fleet_recount_seconds, r.settings):.3f} leases"
            + ("" if r.settings.liveness is Liveness.SESSION else " (not on the takeover path)")
        ),
    )
    row(
        "kill -9 + reaper: p50 / p99 leases",
        lambda r: (
            f"{_leases(_p(r.samples[KILL_REAPER], 50), r.settings):.2f} /"
            f" {_leases(_p(r.samples[KILL_REAPER], 99), r.settings):.2f}"
        ),
    )
    gray_leases = [
        v / r.settings.lease_seconds
        for r in results.values()
        for v in _measured(r.samples.get(GRAY, []))
    ]
    gray_max = max(gray_leases, default=math.nan)
    row(
        "gray failure → owned by a peer: p50 / p99 / max leases",
        lambda r: (
            "not run"
            if not r.samples.get(GRAY, [])
            else f"{_leases(_p(r.samples.get(GRAY, []), 50), r.settings):.2f} /"
            f" {_leases(_p(r.samples.get(GRAY, []), 99), r.settings):.2f} /"
            f" {_leases(max(_measured(r.samples.get(GRAY, [])), default=math.nan), r.settings):.2f}"
        ),
        f"≤ {GRAY_HANDOVER_LEASES:g}, ours ({verdict(gray_max, GRAY_HANDOVER_LEASES)})",
    )
    sigterm_p99 = _leases(_p(sessions.samples[SIGTERM], 99), sessions.settings)
    row(
        "SIGTERM drain, unowned: p99 leases",
        lambda r: f"{_leases(_p(r.samples[SIGTERM], 99), r.settings):.3f}",
        f"≤ {SEED_SIGTERM_P99_LEASES:g} (seed) ({verdict(sigterm_p99, SEED_SIGTERM_P99_LEASES)})",
    )
    row(
        "SIGTERM drain, unowned: p99 s at production timers",
        lambda r: (
            f"{_leases(_p(r.samples[SIGTERM], 99), r.settings) * PRODUCTION_LEASE_SECONDS:.2f}"
        ),
        "also in seconds",
    )
    stop_p99 = _p(sessions.samples[STOP], 99) / sessions.settings.heartbeat_seconds
    row(
        "stop: API call → holder stops, p99 heartbeats",
        lambda r: f"{_p(r.samples[STOP], 99) / r.settings.heartbeat_seconds:.2f}",
        f"≤ 1 ({verdict(stop_p99, 1.0)})",
    )
    row(
        "start: API call → first message in sink, p50 / p99 s",
        lambda r: f"{_p(r.samples[START], 50):.3f} / {_p(r.samples[START], 99):.3f}",
    )
    dup_max = max(sessions.duplicates.get(KILL, []), default=math.nan)
    row(
        "duplicates per takeover after kill -9: p50 / p99 / max",
        lambda r: _duplicates(r, KILL),
        f"≤ one heartbeat = {heartbeat_messages:g} ({verdict(dup_max, heartbeat_messages)})",
    )
    row(
        "duplicates per takeover after kill -9 + reaper: p50 / p99 / max",
        lambda r: _duplicates(r, KILL_REAPER),
        f"≤ {heartbeat_messages:g}",
    )
    row("duplicates after SIGTERM drain: p50 / p99 / max", lambda r: _duplicates(r, SIGTERM))
    row("invariants broken (overlaps, gaps, ...)", lambda r: f"{len(r.violations)}", "0")
    table.notes += _fixed_latency_notes(ctx, results, heartbeat_messages, fleet)
    for preset, result in results.items():
        for line in result.violations[:5]:
            table.notes.append(f"{PRESET_LABELS[preset]}: invariant broken: {line}")
    return table


def _fixed_latency_notes(
    ctx: BenchContext, results: Mapping[str, PresetRun], heartbeat_messages: float, fleet: float
) -> list[str]:
    lease = ctx.lease_seconds
    trips = [v for r in results.values() for v in _measured(r.samples[STORE_ROUND_TRIP])]
    starts = [v for r in results.values() for v in _measured(r.samples[WORKER_START])]
    trip_p99 = percentile(trips, 99)
    start_p50 = percentile(starts, 50)
    small = trip_p99 < FIXED_LATENCY_SHARE * lease
    production_fleet = Settings().fleet_recount_seconds
    floored = fleet > production_fleet * ctx.scale + 1e-9
    return [
        f"Fixed latencies at this scale: a DynamoDB round trip (consistent GetItem from the"
        f" bench while the fleet ran) p50 {percentile(trips, 50) * 1000:.1f} ms, p99"
        f" {trip_p99 * 1000:.1f} ms = {trip_p99 / lease:.1%} of the lease"
        f" ({'under' if small else 'over'} {FIXED_LATENCY_SHARE:.0%}); a takeover is a few"
        " such round trips in a row. A worker's start (process start → services running)"
        f" p50 {start_p50:.2f} s = {start_p50 / lease:.0%} of the lease: on no measured path"
        " (survivors take over; the replacement starts after the round)."
        + (
            ""
            if small
            else " The store's latency is a large part of the lease here: ratios in leases are"
            " inflated; the headline figures are those of `make bench` (--scale 0.5)."
        ),
        f"Fleet re-read interval: production's {production_fleet:g} s × {ctx.scale:g}"
        + (
            f", raised to the floor of {MIN_FLEET_RECOUNT_SECONDS:g} s of the scaled settings"
            f" ({fleet / lease:.3f} leases instead of"
            f" {production_fleet / PRODUCTION_LEASE_SECONDS:.3f})"
            if floored
            else f" = {fleet:g} s ({fleet / lease:.3f} leases, as in production)"
        )
        + ".",
        f"One heartbeat of messages: {RATE:g} msg/s per stream × {lease / 4:g} s ="
        f" {heartbeat_messages:g}. Duplicates: seqs a takeover's new holder delivered again,"
        " per stream moved, from the sink records (the invariant checker).",
        "SIGTERM in production seconds = leases × 20 s (the fixed latencies scale up with it,"
        " so this errs high).",
    ]
