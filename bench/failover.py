"""Failover, stop and start latency: our defaults against the reference preset, same run.

Three workers hold N streams. In each round the busiest worker is taken out — ``kill -9``,
``kill -9`` followed at once by the reaper (what ECS's task-stopped event triggers), or SIGTERM
(graceful drain) — and a replacement is started after the streams have moved. A stream's
*unowned time* is from the moment its holder stopped delivering (the kill; for SIGTERM its
release) to the new holder's acquisition, both read from the workers' lease events on the
machine's one monotonic clock. Stop latency: ``POST /streams/{id}/stop`` → the holder's
``stopped`` event. Start latency: ``POST /streams`` → the first record in the sink.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable
from functools import partial
from typing import Final

from bench.common import Table, percentile, timers_label
from bench.context import PRESET_LABELS, PRESETS, BenchContext
from local.invariant_inputs import LeaseEvent
from local.invariants import load_records
from local.testbed import ACCOUNT, Testbed
from local.worker_process import WorkerProcess

KILL: Final = "kill -9"
KILL_REAPER: Final = "kill -9 + reaper"
SIGTERM: Final = "SIGTERM (drain)"
STOP: Final = "stop: API call → holder stops"
START: Final = "start: API call → first message in sink"
EVENTS: Final = (KILL, KILL_REAPER, SIGTERM, STOP, START)
REAPER_CALL: Final = "reaper handler call"
RATE: Final = 10.0
WORKERS: Final = 3

Samples = dict[str, list[float]]


def _busiest(bed: Testbed) -> tuple[WorkerProcess, set[str]]:
    owners = bed.owners()
    live = {w.worker_id: w for w in bed.live_workers()}
    counts = {wid: sum(1 for o in owners.values() if o == wid) for wid in live}
    victim = live[max(counts, key=lambda wid: counts[wid])]
    return victim, {s for s, o in owners.items() if o == victim.worker_id}


def _first(events: Iterable[LeaseEvent], stream_id: str, after: float, **match: str) -> float:
    """``mono`` of the first event of ``stream_id`` after ``after`` matching ``match`` (NaN:
    none)."""
    times = [
        e.mono
        for e in events
        if e.stream_id == stream_id
        and e.mono >= after
        and all(getattr(e, k) == v for k, v in match.items())
    ]
    return min(times) if times else float("nan")


def _takeover_round(
    bed: Testbed, mode: str, timeout: float, reaper_seconds: list[float]
) -> list[float]:
    victim, held = _busiest(bed)
    old = victim.worker_id
    t0 = time.monotonic()
    if mode == SIGTERM:
        victim.terminate(0)
    else:
        victim.kill()
        if mode == KILL_REAPER:
            reaper_started = time.monotonic()
            bed.reap(victim)
            reaper_seconds.append(time.monotonic() - reaper_started)
    with contextlib.suppress(TimeoutError):  # a stream never taken over counts as "never"
        bed.wait_taken_over(held, old, timeout)
    if mode == SIGTERM:
        victim.wait(bed.settings.shutdown_budget_seconds + 5)
    events = bed.tail.events
    samples = []
    for stream_id in held:
        acquired = min(
            (
                e.mono
                for e in events
                if e.stream_id == stream_id
                and e.event == "acquired"
                and e.worker_id != old
                and e.mono >= t0
            ),
            default=float("nan"),
        )
        stopped_at = t0
        if mode == SIGTERM:
            released = _first(events, stream_id, t0, event="released", worker_id=old)
            stopped_at = t0 if math.isnan(released) else released
        samples.append(acquired - stopped_at)
    bed.add_worker()
    return samples


def _stop_latencies(bed: Testbed, count: int, timeout: float) -> list[float]:
    """Stop ``count`` streams held by live workers; NaN for one whose holder never reacted."""
    live = {w.worker_id for w in bed.live_workers()}
    held = sorted(s for s, owner in bed.owners().items() if owner in live)
    out = []
    for stream_id in held[:count]:
        at = bed.stop_stream(stream_id)

        def ended(stream_id: str = stream_id, at: float = at) -> float:
            bed.tail.refresh()
            times = [
                _first(bed.tail.events, stream_id, at, event=kind)
                for kind in ("stopped", "released", "lost")
            ]
            return min((t for t in times if not math.isnan(t)), default=math.nan)

        try:
            bed.wait_for(lambda: not math.isnan(ended()), timeout, f"stop of {stream_id}")
        except TimeoutError:
            out.append(math.nan)
            continue
        out.append(ended() - at)
    return out


def _start_latencies(bed: Testbed, count: int, timeout: float) -> list[float]:
    out = []
    for i in range(count):
        stream_id = f"late{i:02d}-{int(time.time() * 1000) % 100000}"
        wall_at = time.time()
        bed.start_new_stream(stream_id)
        try:
            bed.wait_for(partial(bed.first_record_after, stream_id), timeout, "first record")
        except TimeoutError:
            out.append(math.nan)
            continue
        records, _ = load_records(bed.sink_file(stream_id))
        first_ms = min(r.received_at_ms for r in records)
        out.append(first_ms / 1000 - wall_at)
    return out


def measure(ctx: BenchContext, preset: str) -> Samples:
    """All five latencies for one preset (see the module docstring)."""
    settings = ctx.settings(preset)
    streams = 12 if ctx.quick else 30
    rounds = 1 if ctx.quick else 2
    samples: Samples = {e: [] for e in (*EVENTS, REAPER_CALL)}
    timeout = 3 * settings.lease_seconds + 2 * settings.reconcile_seconds + 30
    with ctx.testbed(f"failover-{preset}", settings, rate=RATE) as bed:
        for _ in range(WORKERS):
            bed.add_worker()
        ids = bed.create_streams(streams)
        bed.wait_all_owned(ids, timeout)
        bed.reap_task(f"arn:aws:ecs:us-east-1:{ACCOUNT}:task/local/warm-up")  # not a cold start
        for mode in (KILL, KILL_REAPER, SIGTERM):
            for r in range(rounds):
                ctx.progress.update(f"{preset}: {mode}, round {r + 1}/{rounds}", force=True)
                samples[mode] += _takeover_round(bed, mode, timeout, samples[REAPER_CALL])
                with contextlib.suppress(TimeoutError):  # the next round measures what moves
                    bed.wait_all_owned(ids, timeout)
        ctx.progress.update(f"{preset}: stop and start latency", force=True)
        samples[STOP] = _stop_latencies(bed, 3 if ctx.quick else 8, timeout)
        samples[START] = _start_latencies(bed, 3 if ctx.quick else 8, timeout)
    return samples


def run(ctx: BenchContext) -> list[Table]:
    """The failover section: both presets, every event, side by side."""
    results = {}
    for preset in PRESETS:
        results[preset] = measure(ctx, preset)
    lease = ctx.lease_seconds
    table = Table(
        f"Failover and control latency ({timers_label(ctx.scale)}: lease {lease:g} s,"
        f" heartbeat {lease / 4:g} s)",
        [
            "event",
            "preset",
            "n",
            "p50 s",
            "p99 s",
            "max s",
            "p50 leases",
            "p99 leases",
            "max leases",
        ],
    )
    for event in EVENTS:
        for preset in PRESETS:
            values = [v for v in results[preset][event] if not math.isnan(v)]
            missed = len(results[preset][event]) - len(values)
            p50, p99 = percentile(values, 50), percentile(values, 99)
            top = max(values, default=float("nan"))
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
    table.notes += [
        f"Every timer is production's × {ctx.scale:g} (lease 20 s → {lease:g} s, heartbeat 5 s →"
        f" {lease / 4:g} s, reconcile 5 s → {lease / 4:g} s; reference reconcile 60 s →"
        f" {3 * lease:g} s). Seconds × {1 / ctx.scale:g} = production seconds; leases are the"
        " same at any scale.",
        "Reference preset = the seed design: reconcile every 60 s (scaled), release without a"
        " handoff command (handoff_on_release=false), no acquire scheduled for leases that"
        " missed heartbeats (schedule_suspects=false).",
        "Unowned time: kill → new holder's acquire (kill -9), or old holder's release → new"
        " holder's acquire (SIGTERM); from the workers' lease events on one monotonic clock.",
        "kill -9 + reaper: the reaper handler runs in the bench process right after the kill"
        " (warm; p50 of the call itself: "
        + ", ".join(
            f"{PRESET_LABELS[p]} {percentile(results[p][REAPER_CALL], 50):.2f} s" for p in PRESETS
        )
        + "); on AWS, EventBridge delivery and a Lambda invocation come on top.",
    ]
    return [table]
