"""Scale: the most streams one worker holds with every renewal on time, and its own cost.

One ``python -m worker`` at production timers (lease 20 s, heartbeat 5 s, reconcile 5 s), null
sink, is given idle streams in steps (N = 200, 400, ...). At each step, once it holds all N,
the worker's own metric flushes give its renewal lag (how late each renewal was sent after it
was due) and ``/proc`` its CPU (the approach of :mod:`bench.worker_scale`). A step is on time
when the worst renewal lag stays under the heartbeat interval; the ramp stops at the first step
that is not. Against the local moto server (~190 DynamoDB requests/s) the store is the limit,
so the section also derives the worker's capacity per vCPU from its own CPU per renewal and per
message (the latter from the throughput section's busy run) for a store that keeps up.
"""

from __future__ import annotations

import math
import uuid
from typing import Final

from bench import worker_scale
from bench.common import Table, timers_label
from bench.context import BenchContext
from local.upstream_sim import raise_open_file_limit, run_in_thread
from local.worker_process import WorkerProcess
from streamlease.settings import Settings

STEPS: Final = (200, 400, 600, 800, 1000, 1200)
QUICK_STEPS: Final = (50, 100)
RATES_FOR_CAPACITY: Final = (0.0, 1.0, 10.0)
"""Messages/s per stream for which capacity per vCPU is derived."""


def run(ctx: BenchContext) -> list[Table]:
    """The scale section: the ramp, then the capacity it implies."""
    steps = QUICK_STEPS if ctx.quick else STEPS
    seconds = 5.0 if ctx.quick else 10.0
    heartbeat = Settings().heartbeat_seconds
    raise_open_file_limit()
    settings = ctx.resources(
        "scale",
        worker_id=f"bench-scale/1-{uuid.uuid4().hex[:4]}",
        capacity=max(steps) + 10,
        sink="null",
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        metrics_flush_seconds=worker_scale.FLUSH_SECONDS,
        health_file=str(ctx.work_dir / "scale.health"),
    )
    ramp = Table(
        f"Scale: one worker, idle streams ({timers_label(1)}: heartbeat {heartbeat:g} s)",
        [
            "streams held",
            "renewals/s",
            "renewal lag p50 ms",
            "p99 ms",
            "max ms",
            "every renewal on time",
            "worker CPU % of a core",
            "CPU µs per renewal",
        ],
    )
    largest = 0
    per_renewal: list[float] = []
    held = 0
    with run_in_thread() as sim:
        worker = WorkerProcess.start(settings, "scale", ctx.work_dir / "scale.log")
        try:
            for n in steps:
                ids = [f"scale-{i:05d}" for i in range(held, n)]
                worker_scale.seed(
                    settings, ids, lambda s: sim.url_for(s, rate=worker_scale.IDLE_RATE)
                )
                ctx.progress.update(f"{n} streams: acquiring, then {seconds:g} s", force=True)
                try:
                    window = worker_scale.measure(worker, n, seconds)
                except RuntimeError:
                    ramp.add(n, None, None, None, None, "never held them all", None, None)
                    break
                held = n
                on_time = window.lag_max < heartbeat * 1000
                cpu_per_renewal = window.cpu_seconds / max(1, window.renewals)
                per_renewal.append(cpu_per_renewal)
                ramp.add(
                    n,
                    window.renewals / window.seconds,
                    sorted(window.lag_p50s)[len(window.lag_p50s) // 2],
                    max(window.lag_p99s),
                    window.lag_max,
                    "yes" if on_time else "no",
                    100 * window.cpu_seconds / window.seconds,
                    cpu_per_renewal * 1e6,
                )
                if not on_time:
                    break
                largest = n
        finally:
            worker.stop(settings.shutdown_budget_seconds + 10)
    ramp.notes += [
        "Renewal lag: how late each renewal was sent after it was due, from the worker's own"
        " per-interval summaries (p50: median of interval medians, p99: worst interval's p99).",
        "The local moto server answers ~190 DynamoDB requests/s, serialised; at a 5 s heartbeat"
        " that is ~950 renewals' worth: the ramp measures the store as much as the worker.",
    ]
    return [ramp, _capacity(ctx, largest, per_renewal, heartbeat)]


def _capacity(ctx: BenchContext, largest: int, per_renewal: list[float], heartbeat: float) -> Table:
    table = Table(
        f"Scale: what one vCPU holds when the store is not the bottleneck ({timers_label(1)})",
        ["measure", "value"],
    )
    table.add("largest N with every renewal on time (local moto)", largest or None)
    # The per-renewal cost at the largest on-time step amortises fixed costs best.
    cpu_renewal = per_renewal[-1] if per_renewal else math.nan
    cpu_message = math.nan
    window = ctx.shared.get("throughput_window")
    if window is not None and window.messages:
        busy = window.cpu_seconds - window.renewals * cpu_renewal
        cpu_message = max(0.0, busy) / window.messages
    table.add(
        "worker CPU per renewal (everything a held idle stream costs)",
        f"{cpu_renewal * 1e6:,.0f} µs",
    )
    table.add(
        "worker CPU per message (throughput run, renewal cost taken off)",
        "run the throughput section" if math.isnan(cpu_message) else f"{cpu_message * 1e6:,.1f} µs",
    )
    for rate in RATES_FOR_CAPACITY:
        if rate and math.isnan(cpu_message):
            continue
        per_stream = cpu_renewal / heartbeat + (rate * cpu_message if rate else 0.0)
        label = "idle" if not rate else f"{rate:g} msg/s"
        table.add(
            f"streams per vCPU, {label} per stream",
            f"{1 / per_stream:,.0f}" if per_stream else None,
        )
    table.notes.append(
        f"Streams per vCPU = 1 / (CPU per renewal / {heartbeat:g} s + rate × CPU per message):"
        " the worker's own CPU only; DynamoDB answering in time is assumed, as on AWS."
    )
    return table
