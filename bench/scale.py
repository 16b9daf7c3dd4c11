"""Scale and CPU: the most streams one worker holds with every renewal on time, and what a held
idle stream costs it, sessions against per-stream.

Per preset, one ``python -m worker`` at production timers (lease 20 s, heartbeat 5 s, reconcile
5 s), null sink, is given idle streams in steps (sessions: 1,000, 2,000, … up to the capacity
limit of the settings; per-stream: a short ramp around where the store stops it). The upstream
simulator runs in a process of its own; every process's open-file limit is raised to the hard
limit. At each step, once the worker holds all N and one metric flush more has passed, a window
is measured: the worker's own flushes give its renewal lag (how late each renewal was sent after
it was due) and round trip, ``/proc`` the CPU of the worker, the simulator and the moto server.
A step is on time when every renewal in the window was sent less than a heartbeat late and
answered within a heartbeat, and nothing was fenced; the ramp stops at the first step that is
not, and says what bounded it.

An idle stream sends one message when it connects and then none (the simulator's ``rate=0`` is
flat out, so "idle" is one message per 1,000 s). CPU per held idle stream is the worker's CPU
per stream and second over a longer window at :data:`CPU_STREAMS` (renewals, keepalive pings,
the own-lease and fleet reads, loops: everything a held stream costs apart from its messages).
"""

from __future__ import annotations

import dataclasses
import math
import os
import uuid
from dataclasses import dataclass, field
from typing import Final

from bench import upstream_throughput, worker_scale
from bench.common import Table, timers_label
from bench.context import (
    PER_STREAM,
    PRESET_LABELS,
    RENEWAL_PRESETS,
    SESSIONS,
    BenchContext,
    preset_settings,
)
from local.worker_process import WorkerProcess
from streamlease.settings import MAX_CAPACITY, Settings
from worker.os_limits import raise_open_file_limit

STEPS: Final = {
    SESSIONS: (1000, 2000, 3000, 4000, 5000, 6000, 7000, MAX_CAPACITY),
    PER_STREAM: (250, 500, 800, 1000),
}
QUICK_STEPS: Final = {SESSIONS: (250, 1000), PER_STREAM: (250,)}
CPU_STREAMS: Final = {SESSIONS: (1000, 5000), PER_STREAM: (250, 500)}
"""Where CPU per held idle stream is measured, with the longer window: two sizes, so that what
a worker spends whatever it holds (its session renewal, fleet and orphan reads, timers) is told
apart from what each stream adds (keepalive pings, its share of the renewal and of the
own-stream poll). Per-stream renewals of 1,000 streams every 5 s are more than the local moto
server answers, so that preset stops at 500."""
QUICK_CPU_STREAMS: Final = {SESSIONS: (250, 1000), PER_STREAM: (250,)}
WINDOW_SECONDS: Final = 20.0
CPU_WINDOW_SECONDS: Final = 40.0
"""Two keepalive ping intervals and eight heartbeats."""
QUICK_WINDOW_SECONDS: Final = 10.0
QUICK_CPU_WINDOW_SECONDS: Final = 15.0
IDLE_STREAMS_GOAL: Final = 10_000
GOAL_US_PER_STREAM_SECOND: Final = 10.0
"""Sessions: worker CPU per held idle stream (µs per second): 10,000 idle streams ≤ 10 % of a
core."""
RATES_FOR_CAPACITY: Final = (1.0, 10.0)
"""Messages/s per stream for which capacity per vCPU is derived (besides idle)."""
FD_EXHAUSTED: Final = ("Too many open files", "EMFILE", "[Errno 24]")
"""How running out of file descriptors shows in a worker's log."""
MOTO_BUSY: Final = 0.7
"""Share of a core at which the serialised moto server (one lock, one GIL) is the limit."""
SIMULATOR: Final = "simulator"
MOTO: Final = "moto"


@dataclass
class Step:
    """One step of a ramp: the streams asked for and what the window saw (None: never held)."""

    streams: int
    window: worker_scale.Window | None
    on_time: bool
    failure: str = ""
    """Why the step is not on time, or why the worker never held them all."""


@dataclass
class Ramp:
    """One preset's ramp."""

    preset: str
    steps: list[Step] = field(default_factory=list)
    cpu: list[worker_scale.Window] = field(default_factory=list)
    """The longer windows at :data:`CPU_STREAMS`, fewest streams first."""
    bound: str = ""
    """What stopped the ramp (or that it reached its last step)."""

    @property
    def idle_cost(self) -> IdleCost | None:
        """CPU per worker and per held idle stream from the CPU windows (None: none)."""
        return idle_cost(self.cpu)

    @property
    def largest_on_time(self) -> int:
        """The most streams held with every renewal on time (0: none)."""
        return max((s.streams for s in self.steps if s.on_time), default=0)


@dataclass(frozen=True)
class IdleCost:
    """A worker's CPU while it holds idle streams, as ``fixed + streams × per_stream`` (CPU
    seconds per second); ``fitted``: from two sizes (else ``fixed`` is 0 and ``per_stream``
    is the average, which errs high)."""

    fixed: float
    per_stream: float
    fitted: bool

    def share_of_core(self, streams: int) -> float:
        """The CPU share of ``streams`` idle streams."""
        return self.fixed + streams * self.per_stream


def idle_cost(windows: list[worker_scale.Window]) -> IdleCost | None:
    """The line through the smallest and the largest CPU window (streams → CPU/s)."""
    if not windows:
        return None
    small, large = windows[0], windows[-1]
    rate_small = small.cpu_seconds / small.seconds
    if large.held_min <= small.held_min:
        return IdleCost(0.0, rate_small / max(1, small.held_min), fitted=False)
    rate_large = large.cpu_seconds / large.seconds
    per_stream = max(0.0, (rate_large - rate_small) / (large.held_min - small.held_min))
    fixed = max(0.0, rate_small - per_stream * small.held_min)
    return IdleCost(fixed, per_stream, fitted=True)


def us_per_stream_second(window: worker_scale.Window) -> float:
    """Worker CPU per held stream and second of a window, µs."""
    held = max(1, window.held_min)
    return window.cpu_seconds / held / window.seconds * 1e6


def lateness(window: worker_scale.Window, heartbeat_seconds: float) -> str:
    """Why a window is not on time ('' when it is): a renewal sent or answered a heartbeat
    late, or anything fenced or expired."""
    limit = heartbeat_seconds * 1000
    reasons = []
    if window.lag_max >= limit:
        reasons.append(f"a renewal sent {window.lag_max:,.0f} ms late")
    if max(window.call_p99s, default=0.0) >= limit:
        reasons.append(f"renewal round trip p99 {max(window.call_p99s):,.0f} ms")
    if window.leases_lost:
        reasons.append(f"{window.leases_lost} leases lost")
    if window.sessions_expired:
        reasons.append("the session expired")
    return ", ".join(reasons)


def bound_of(step: Step, heartbeat_seconds: float, log_tail: str) -> str:
    """What the failed ``step`` says bounded the ramp: file descriptors, the worker's CPU, the
    store (the serialised moto server busy on its one core, or slow to answer), the machine,
    or what the worker log shows."""
    if step.window is None:
        if any(sign in log_tail for sign in FD_EXHAUSTED):
            return "file descriptors (EMFILE in the worker log)"
        return f"the worker never held them all ({step.failure.splitlines()[0]})"
    w = step.window
    worker = w.cpu_seconds / w.seconds
    moto = w.other_cpu_seconds.get(MOTO, 0.0) / w.seconds
    total = worker + sum(w.other_cpu_seconds.values()) / w.seconds
    cores = len(os.sched_getaffinity(0))
    if worker >= 0.9:
        return f"the worker's CPU ({worker:.0%} of a core)"
    if moto >= MOTO_BUSY:
        return f"the store: the serialised moto server busy {moto:.0%} of a core ({step.failure})"
    if total >= 0.9 * cores:
        return f"the machine's CPU (worker + simulator + moto = {total:.0%} of {cores} cores)"
    if max(w.call_p99s, default=0.0) >= 0.5 * heartbeat_seconds * 1000:
        return f"the store: moto round trips ({step.failure})"
    return step.failure


def ramp(
    ctx: BenchContext,
    preset: str,
    steps: tuple[int, ...],
    cpu_streams: tuple[int, ...],
    port: int,
    others: dict[str, int],
) -> Ramp:
    """Give one worker of ``preset`` ``steps`` streams in turn until a step is late."""
    quick = ctx.quick
    window_seconds = QUICK_WINDOW_SECONDS if quick else WINDOW_SECONDS
    cpu_seconds = QUICK_CPU_WINDOW_SECONDS if quick else CPU_WINDOW_SECONDS
    base = ctx.resources(f"scale-{preset}")
    settings = preset_settings(preset, base)
    heartbeat = settings.heartbeat_seconds
    name = f"scale-{preset}"
    settings = dataclasses.replace(
        settings,
        worker_id=f"bench-{name}/1-{uuid.uuid4().hex[:4]}",
        capacity=min(MAX_CAPACITY, max(steps)),
        sink="null",
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        metrics_flush_seconds=worker_scale.FLUSH_SECONDS,
        health_file=str(ctx.work_dir / f"{name}.health"),
    )
    out = Ramp(preset)
    held = 0

    def url_for(stream_id: str) -> str:
        return f"ws://127.0.0.1:{port}/{stream_id}?rate={worker_scale.IDLE_RATE:g}"

    worker = WorkerProcess.start(settings, name, ctx.work_dir / f"{name}.log")
    tail = worker_scale.FlushTail(worker.log_path)
    try:
        for n in steps:
            ids = [f"{name}-{i:05d}" for i in range(held, n)]
            try:
                worker_scale.seed(settings, ids, url_for)
            except Exception as exc:  # the store gave up: that is the ramp's bound
                out.steps.append(Step(n, None, False, f"seeding failed: {exc}"))
                out.bound = f"the store: writing the step's stream items failed ({exc})"
                break
            seconds = cpu_seconds if n in cpu_streams else window_seconds
            ctx.progress.update(
                f"{PRESET_LABELS[preset]}: {n:,} streams: acquiring, then {seconds:g} s", force=True
            )
            try:
                window = worker_scale.measure(
                    worker,
                    n,
                    seconds,
                    tail=tail,
                    settle_seconds=worker_scale.FLUSH_SECONDS,
                    ramp_timeout_seconds=60 + (n - held) * 0.1,
                    others=others,
                )
            except RuntimeError as exc:
                step = Step(n, None, False, str(exc))
                out.steps.append(step)
                out.bound = bound_of(step, heartbeat, worker.log_tail(200))
                break
            held = n
            late = lateness(window, heartbeat)
            step = Step(n, window, not late, late)
            out.steps.append(step)
            if n in cpu_streams:
                out.cpu.append(window)
            if late:
                out.bound = bound_of(step, heartbeat, worker.log_tail(200))
                break
        else:
            last = steps[-1]
            out.bound = (
                f"not reached: every step on time up to {last:,}, the capacity limit of the"
                " settings (MAX_CAPACITY: a session's checkpoint vector must fit its item)"
                if last == MAX_CAPACITY
                else f"not reached: every step on time up to {last:,}, the ramp's last step"
            )
    finally:
        worker.stop(settings.shutdown_budget_seconds + 10)
    return out


def run(ctx: BenchContext) -> list[Table]:
    """The scale section: both ramps, the CPU per held idle stream, and the capacity."""
    steps = QUICK_STEPS if ctx.quick else STEPS
    cpu_streams = QUICK_CPU_STREAMS if ctx.quick else CPU_STREAMS
    raise_open_file_limit()
    ramps: dict[str, Ramp] = {}
    with upstream_throughput.simulator_process() as (port, sim_pid):
        others = {SIMULATOR: sim_pid, MOTO: ctx.moto.pid}
        for preset in RENEWAL_PRESETS:
            ramps[preset] = ramp(ctx, preset, steps[preset], cpu_streams[preset], port, others)
    return [ramp_table(ramps), cpu_table(ramps), capacity_table(ctx, ramps)]


def ramp_table(ramps: dict[str, Ramp]) -> Table:
    """Every step of both ramps."""
    heartbeat = Settings().heartbeat_seconds
    table = Table(
        f"Scale: one worker, idle streams, local moto ({timers_label(1)}: heartbeat"
        f" {heartbeat:g} s)",
        [
            "preset",
            "streams held",
            "renewals/s",
            "renewal lag p50 / max ms",
            "renewal round trip p99 ms",
            "lag while acquiring, max ms",
            "every renewal on time",
            "worker CPU % of a core",
            "µs per stream-second",
            "simulator / moto CPU %",
        ],
    )
    for preset, r in ramps.items():
        for step in r.steps:
            w = step.window
            if w is None:
                never = f"no: {step.failure.splitlines()[0]}"
                asked = f"{step.streams:,} asked"
                table.add(
                    PRESET_LABELS[preset], asked, None, None, None, None, never, None, None, None
                )
                continue
            others = w.other_cpu_seconds
            table.add(
                PRESET_LABELS[preset],
                step.streams,
                w.renewals / w.seconds,
                f"{sorted(w.lag_p50s)[len(w.lag_p50s) // 2]:,.1f} / {w.lag_max:,.1f}",
                max(w.call_p99s, default=math.nan),
                w.ramp_lag_max,
                "yes" if step.on_time else f"no: {step.failure}",
                100 * w.cpu_seconds / w.seconds,
                us_per_stream_second(w),
                f"{100 * others.get(SIMULATOR, math.nan) / w.seconds:.0f} /"
                f" {100 * others.get(MOTO, math.nan) / w.seconds:.0f}",
            )
    for preset, r in ramps.items():
        table.notes.append(
            f"{PRESET_LABELS[preset]}: most streams with every renewal on time:"
            f" {r.largest_on_time:,}; bound: {r.bound}."
        )
    table.notes += [
        "On time: every renewal in the window sent less than a heartbeat after it was due and"
        " answered within a heartbeat, no lease lost, no session expired (from the worker's own"
        " per-interval summaries: lag p50 is the median of interval medians). Sessions renew"
        " once per heartbeat per worker; per-stream once per heartbeat per stream.",
        "Lag while acquiring: the worst renewal lag while the step's new streams were being"
        " acquired and connected (not part of the verdict).",
        "Simulator and moto run in processes of their own on the same machine (CPU % of a core"
        f" over the window); open-file limit {raise_open_file_limit():,}.",
    ]
    return table


def cpu_table(ramps: dict[str, Ramp]) -> Table:
    """CPU per worker and per held idle stream, and what 10,000 idle streams take."""
    table = Table(
        f"Worker CPU per held idle stream ({timers_label(1)})",
        [
            "preset",
            "streams held (windows)",
            "worker CPU % of a core",
            "per worker, % of a core",
            "µs per stream-second",
            "µs per stream per heartbeat",
            f"{IDLE_STREAMS_GOAL:,} idle streams: % of a core",
        ],
    )
    heartbeat = Settings().heartbeat_seconds
    for preset, r in ramps.items():
        cost = r.idle_cost
        if cost is None:
            table.add(PRESET_LABELS[preset], None, None, None, None, None, None)
            continue
        table.add(
            PRESET_LABELS[preset],
            " and ".join(f"{w.held_min:,} ({w.seconds:.0f} s)" for w in r.cpu),
            " and ".join(f"{100 * w.cpu_seconds / w.seconds:.1f}" for w in r.cpu),
            100 * cost.fixed if cost.fitted else None,
            cost.per_stream * 1e6,
            cost.per_stream * 1e6 * heartbeat,
            100 * cost.share_of_core(IDLE_STREAMS_GOAL),
        )
    sessions = ramps.get(SESSIONS)
    cost = sessions.idle_cost if sessions is not None else None
    if cost is not None:
        per = cost.per_stream * 1e6
        share = cost.share_of_core(IDLE_STREAMS_GOAL)
        met = per <= GOAL_US_PER_STREAM_SECOND and share <= 0.1
        table.notes.append(
            f"Goal, sessions: ≤ {GOAL_US_PER_STREAM_SECOND:g} µs per stream-second and"
            f" {IDLE_STREAMS_GOAL:,} idle streams ≤ 10 % of a core: {per:.1f} µs,"
            f" {100 * share:.1f} % ({'met' if met else 'not met'})."
        )
    table.notes += [
        "Worker CPU (user + system, /proc) over each window. Two windows per preset give a"
        " line: per worker (what it spends whatever it holds: its session renewal, fleet and"
        " orphan reads, timers) and per stream (what each held stream adds: keepalive pings"
        " every 20 s each way, its share of the renewal and the own-stream poll). The 10,000"
        " column is that line at 10,000; the ramp above measures each size directly.",
        "The issue's per-stream figure is 2.3 ms per 5 s renewal: µs per stream per heartbeat"
        " above is the same unit.",
    ]
    return table


def capacity_table(ctx: BenchContext, ramps: dict[str, Ramp]) -> Table:
    """Streams per vCPU from the CPU per idle stream and per message, when the store keeps up."""
    table = Table(
        f"Scale: what one vCPU holds when the store is not the bottleneck ({timers_label(1)})",
        ["measure", *(PRESET_LABELS[p] for p in ramps)],
    )
    costs = {p: r.idle_cost for p, r in ramps.items()}
    idle = {p: c.per_stream if c is not None else math.nan for p, c in costs.items()}
    table.add(
        "largest N with every renewal on time (local moto)",
        *(r.largest_on_time or None for r in ramps.values()),
    )
    table.add(
        "worker CPU per held idle stream",
        *(f"{idle[p] * 1e6:,.1f} µs/s" for p in ramps),
    )
    cpu_message = math.nan
    window = ctx.shared.get("throughput_window")
    sessions_cost = costs.get(SESSIONS)
    if window is not None and window.messages and sessions_cost is not None:
        idle_share = sessions_cost.share_of_core(window.held_min)
        busy = window.cpu_seconds - idle_share * window.seconds
        cpu_message = max(0.0, busy) / window.messages
    table.add(
        "worker CPU per message (throughput run, idle cost taken off)",
        *(
            "run the throughput section"
            if math.isnan(cpu_message)
            else f"{cpu_message * 1e6:,.1f} µs"
            for _ in ramps
        ),
    )
    table.add("streams per vCPU, idle", *(_per_vcpu(idle[p]) for p in ramps))
    for rate in RATES_FOR_CAPACITY:
        if math.isnan(cpu_message):
            continue
        table.add(
            f"streams per vCPU, {rate:g} msg/s per stream",
            *(_per_vcpu(idle[p] + rate * cpu_message) for p in ramps),
        )
    table.notes.append(
        "Streams per vCPU = 1 / (CPU per idle stream-second + rate × CPU per message): the"
        " worker's own CPU only; DynamoDB answering in time is assumed, as on AWS. CPU per"
        " message comes from the throughput section's worker (sessions, lease 60 s)."
    )
    return table


def _per_vcpu(seconds_per_stream_second: float) -> str | None:
    if math.isnan(seconds_per_stream_second) or seconds_per_stream_second <= 0:
        return None
    return f"{1 / seconds_per_stream_second:,.0f}"
