"""Failover, stop and start latency: our defaults against the reference preset, same run.

Three workers hold N streams. In each round the busiest worker is taken out — ``kill -9``,
``kill -9`` followed at once by the reaper (what ECS's task-stopped event triggers), or SIGTERM
(graceful drain) — and a replacement is started after the streams have moved; the next round
begins once the replacement runs and its start-up reconcile is over. A stream's *unowned time*
is from the moment its holder stopped delivering (the kill; for SIGTERM its release) to the new
holder's acquisition, both read from the workers' lease events on the machine's one monotonic
clock. A round waits until every one of the victim's streams has been acquired by another
worker, as read from every worker's event log (workers added by earlier rounds included), or
until its timeout: "never" means not within that timeout. Stop latency:
``POST /streams/{id}/stop`` → the holder's ``stopped`` event. Start latency: ``POST /streams`` →
the first record in the sink.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

from bench.common import Table, percentile, timers_label
from bench.context import PRESET_LABELS, PRESETS, BenchContext
from local.invariant_inputs import LeaseEvent
from local.invariant_model import ACQUIRED
from local.invariants import load_records
from local.testbed import ACCOUNT, Testbed
from local.worker_process import WorkerProcess
from streamlease.settings import Settings

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
"""Event (or :data:`REAPER_CALL`) → seconds, NaN for "never"."""


@dataclass
class PresetRun:
    """What one preset's run measured."""

    samples: Samples
    timeout_seconds: float
    """How long a round waited for a stream before counting it "never"."""
    stop_passed_over: int = 0
    """Streams not stopped after all: the events show no holder at the call (a rebalance had
    just let go of it)."""


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


@dataclass(frozen=True)
class TakeoverRound:
    """One round: which worker was taken out, how and when, and what its streams went through."""

    mode: str
    victim: str
    started_mono: float
    """When the victim was killed or sent SIGTERM (monotonic seconds)."""
    unowned_seconds: dict[str, float]
    """Per stream the victim held: seconds without an owner; NaN when no other worker acquired
    it within the round's timeout."""


def takeovers(
    events: Iterable[LeaseEvent], stream_ids: Iterable[str], victim: str, after: float
) -> dict[str, float]:
    """Stream → ``mono`` of its first acquisition by a worker other than ``victim`` at or after
    ``after``; streams not (yet) acquired are left out."""
    wanted = set(stream_ids)
    out: dict[str, float] = {}
    for e in events:
        if (
            e.event == ACQUIRED
            and e.stream_id in wanted
            and e.worker_id != victim
            and e.mono >= after
        ):
            out[e.stream_id] = min(e.mono, out.get(e.stream_id, math.inf))
    return out


def takeover_round(
    bed: Testbed, mode: str, timeout: float, reaper_seconds: list[float]
) -> TakeoverRound:
    """Take the busiest worker out by ``mode``, wait until its streams are acquired elsewhere
    (read from the event logs, at most ``timeout`` seconds), then start a replacement.

    The wait is on the very events the figures are computed from: a stream is "never" taken
    over only if no other worker's log shows it acquired within ``timeout``.
    """
    victim, held = _busiest(bed)
    old = victim.worker_id
    already_read = len(bed.tail.events)  # written before t0: the round needs only later ones
    t0 = time.monotonic()
    if mode == SIGTERM:
        victim.terminate(0)
    else:
        victim.kill()
        if mode == KILL_REAPER:
            reaper_started = time.monotonic()
            bed.reap(victim)
            reaper_seconds.append(time.monotonic() - reaper_started)

    def all_taken() -> bool:
        bed.tail.refresh()
        return len(takeovers(bed.tail.events[already_read:], held, old, t0)) == len(held)

    with contextlib.suppress(TimeoutError):  # a stream never taken over counts as "never"
        bed.wait_for(all_taken, timeout, f"{len(held)} streams of {old} acquired elsewhere")
    if mode == SIGTERM:
        victim.wait(bed.settings.shutdown_budget_seconds + 5)
    bed.tail.refresh()
    events = bed.tail.events[already_read:]
    acquired = takeovers(events, held, old, t0)
    unowned = {}
    for stream_id in held:
        stopped_at = t0
        if mode == SIGTERM:
            released = _first(events, stream_id, t0, event="released", worker_id=old)
            stopped_at = t0 if math.isnan(released) else released
        unowned[stream_id] = acquired.get(stream_id, math.nan) - stopped_at
    _replace(bed, timeout)
    return TakeoverRound(mode, old, t0, unowned)


def _replace(bed: Testbed, timeout: float) -> None:
    """Start the victim's replacement and let its start-up reconcile pass. Running into the next
    round, that reconcile would take the next victim's released streams at a moment set by
    process start-up, not by the protocol (the reference preset otherwise finds them only at its
    next reconcile, every three leases)."""
    replacement = bed.add_worker()
    with contextlib.suppress(TimeoutError):  # a slow start must not sink the run
        bed.wait_worker_running(replacement, timeout)
    time.sleep(bed.settings.heartbeat_seconds)  # ample for one query and a few acquires


def _stop_latencies(bed: Testbed, count: int, timeout: float) -> tuple[list[float], int]:
    """Stop ``count`` held streams, one at a time: seconds from the API call to the holder's
    ``stopped``/``released``/``lost`` event (NaN: its holder never reacted within ``timeout``).

    Also returns how many streams were passed over because the lease events show no holder at
    the moment of the call (a rebalance had just released it): no stop latency to measure.
    """
    out: list[float] = []
    passed_over = 0
    stopped: set[str] = set()
    while len(out) < count and passed_over <= count:
        live = {w.worker_id for w in bed.live_workers()}
        held = sorted(s for s, owner in bed.owners().items() if owner in live and s not in stopped)
        if not held:
            break
        stream_id = held[0]
        stopped.add(stream_id)
        at = bed.stop_stream(stream_id)

        def ended(stream_id: str = stream_id, at: float = at) -> float:
            bed.tail.refresh()
            times = [
                _first(bed.tail.events, stream_id, at, event=kind)
                for kind in ("stopped", "released", "lost")
            ]
            return min((t for t in times if not math.isnan(t)), default=math.nan)

        def unheld(stream_id: str = stream_id, at: float = at) -> bool:
            return stream_id not in bed.owners(at)

        try:
            bed.wait_for(
                lambda: not math.isnan(ended()) or unheld(), timeout, f"stop of {stream_id}"
            )
        except TimeoutError:
            out.append(math.nan)
            continue
        if math.isnan(ended()):
            passed_over += 1
            continue
        out.append(ended() - at)
    return out, passed_over


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


def round_timeout(settings: Settings) -> float:
    """How long a round waits for a stream to move before it counts as "never" (seconds)."""
    return 3 * settings.lease_seconds + 2 * settings.reconcile_seconds + 30


def start_fleet(ctx: BenchContext, bed: Testbed, streams: int) -> list[str]:
    """Start the section's workers and ``streams`` streams; returns their ids once all are
    owned (and the reaper handler is warm)."""
    for _ in range(WORKERS):
        bed.add_worker()
    ids = bed.create_streams(streams)
    bed.wait_all_owned(ids, round_timeout(bed.settings))
    bed.reap_task(f"arn:aws:ecs:us-east-1:{ACCOUNT}:task/local/warm-up")  # not a cold start
    return ids


def run_rounds(
    ctx: BenchContext,
    bed: Testbed,
    ids: Sequence[str],
    modes: Sequence[str],
    rounds: int,
    reaper_seconds: list[float],
) -> list[TakeoverRound]:
    """``rounds`` takeover rounds of each mode in turn, each after every stream is owned again."""
    timeout = round_timeout(bed.settings)
    out = []
    for mode in modes:
        for r in range(rounds):
            ctx.progress.update(f"{mode}, round {r + 1}/{rounds}", force=True)
            out.append(takeover_round(bed, mode, timeout, reaper_seconds))
            with contextlib.suppress(TimeoutError):  # the next round measures what moves
                bed.wait_all_owned(ids, timeout)
    return out


def measure(ctx: BenchContext, preset: str) -> PresetRun:
    """All five latencies for one preset (see the module docstring)."""
    settings = ctx.settings(preset)
    streams = 12 if ctx.quick else 30
    rounds = 1 if ctx.quick else 2
    samples: Samples = {e: [] for e in (*EVENTS, REAPER_CALL)}
    timeout = round_timeout(settings)
    with ctx.testbed(f"failover-{preset}", settings, rate=RATE) as bed:
        ids = start_fleet(ctx, bed, streams)
        for done in run_rounds(
            ctx, bed, ids, (KILL, KILL_REAPER, SIGTERM), rounds, samples[REAPER_CALL]
        ):
            samples[done.mode] += list(done.unowned_seconds.values())
        ctx.progress.update(f"{preset}: stop and start latency", force=True)
        samples[STOP], passed_over = _stop_latencies(bed, 3 if ctx.quick else 8, timeout)
        samples[START] = _start_latencies(bed, 3 if ctx.quick else 8, timeout)
    return PresetRun(samples, timeout, passed_over)


def run(ctx: BenchContext) -> list[Table]:
    """The failover section: both presets, every event, side by side."""
    results = {preset: measure(ctx, preset) for preset in PRESETS}
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
            measured = results[preset].samples[event]
            values = [v for v in measured if not math.isnan(v)]
            missed = len(measured) - len(values)
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
    timeouts = ", ".join(f"{PRESET_LABELS[p]} {results[p].timeout_seconds:.0f} s" for p in PRESETS)
    passed_over = sum(r.stop_passed_over for r in results.values())
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
        "A round waits until every stream of the victim is acquired elsewhere, read from every"
        f" worker's event log; never = not acquired within the round's timeout ({timeouts}).",
        "kill -9 + reaper: the reaper handler runs in the bench process right after the kill"
        " (warm; p50 of the call itself: "
        + ", ".join(
            f"{PRESET_LABELS[p]} {percentile(results[p].samples[REAPER_CALL], 50):.2f} s"
            for p in PRESETS
        )
        + "); on AWS, EventBridge delivery and a Lambda invocation come on top.",
    ]
    if passed_over:
        table.notes.append(
            f"stop: {passed_over} stream(s) passed over, released by a rebalance just before"
            " the call (no holder to stop)."
        )
    return [table]
