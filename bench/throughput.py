"""Throughput: one whole worker against a bare websockets client, same simulator, same run.

The simulator runs in its own process (:func:`bench.upstream_throughput.simulator_process`).
Against it, in turn: the bare ``websockets`` client of :mod:`bench.upstream_throughput` (receive
only, in this process), and one ``python -m worker`` holding the same number of streams with its
real lease, renewals + checkpoints and the ``null`` sink (measured the way
:mod:`bench.worker_scale` does: CPU from ``/proc``, messages from the worker's metric flushes).
Memory per held stream is the worker's resident-set growth from no streams to N, divided by N.
At N × 10 msg/s a third run has the worker write to the ``kinesis`` sink on the local moto
server (batched PutRecords shared by every stream): what a real sink adds per message.

The worker here renews every 15 s (lease 60 s): 1,000 streams at the production 5 s would need
200 renewals/s, more than the local moto server answers; renewal cost is the scale section's.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench import upstream_throughput, worker_scale
from bench.common import Table
from bench.context import BenchContext
from local.worker_process import WorkerProcess
from worker.os_limits import raise_open_file_limit

THROUGHPUT_LEASE_SECONDS: Final = 60.0
FLAT_OUT_STREAMS: Final = 10
BARE: Final = upstream_throughput.BARE


@dataclass
class Run:
    """One client over one measured window."""

    client: str
    streams: int
    rate: float
    messages: int
    seconds: float
    cpu_seconds: float
    renewals: int = 0
    held: int | None = None
    """Fewest streams the worker held during the window (None: not a worker)."""
    rss_per_stream_kib: float | None = None

    @property
    def per_second(self) -> float:
        """Messages per second over the window."""
        return self.messages / self.seconds if self.seconds else float("nan")

    @property
    def cpu_us_per_message(self) -> float:
        """Client CPU (user + system) per message, µs."""
        return self.cpu_seconds / self.messages * 1e6 if self.messages else float("nan")


def _rss_kib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1])
    return float("nan")


def _wait_started(worker: WorkerProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while '"worker started"' not in worker.log_tail(200):
        if time.monotonic() > deadline or not worker.alive:
            raise RuntimeError(f"worker did not start:\n{worker.log_tail()}")
        time.sleep(0.1)
    time.sleep(1.0)  # past start-up allocations (clients, thread pool)


@dataclass
class Window:
    """What one measuring window saw of a worker (from its metric flushes and ``/proc``)."""

    cpu_seconds: float
    messages: int
    renewals: int
    lag_max: float
    held_min: int
    seconds: float


def _measure(worker: WorkerProcess, streams: int, seconds: float, ramp_seconds: float) -> Window:
    """Like :func:`bench.worker_scale.measure`, but a worker that never holds all ``streams``
    (CPU-bound, fencing) is measured anyway, and the fewest streams it held is recorded."""
    seen = 0
    deadline = time.monotonic() + ramp_seconds
    while time.monotonic() < deadline:
        new, seen = worker_scale.flush_lines(worker, seen)
        if any(r.get("active_connections") == streams for r in new):
            break
        if not worker.alive:
            raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
        time.sleep(0.2)
    start_cpu, start = worker_scale.cpu_seconds(worker.pid), time.monotonic()
    records: list[dict[str, Any]] = []
    while time.monotonic() - start < seconds or not records:
        time.sleep(0.1)
        new, seen = worker_scale.flush_lines(worker, seen)
        records += new
    end_cpu, end = worker_scale.cpu_seconds(worker.pid), time.monotonic()
    return Window(
        cpu_seconds=end_cpu - start_cpu,
        messages=sum(r["counters"]["MessagesReceived"] for r in records),
        renewals=sum(r["renewals"] for r in records),
        lag_max=max(r["renewal_lag_ms_max"] for r in records),
        held_min=min(int(r.get("active_connections", 0)) for r in records),
        seconds=end - start,
    )


def worker_run(
    ctx: BenchContext, port: int, streams: int, rate: float, seconds: float, sink: str = "null"
) -> tuple[Run, Window]:
    """One worker holding ``streams`` streams at ``rate`` msg/s (0: flat out), writing to
    ``sink`` (``null``, or ``kinesis``: the local moto server's stream)."""
    name = f"tp{streams}-{sink}"
    lease = THROUGHPUT_LEASE_SECONDS
    settings = ctx.resources(
        name,
        worker_id=f"bench-{name}/1-{uuid.uuid4().hex[:4]}",
        lease_seconds=lease,
        heartbeat_seconds=lease / 4,
        fence_margin_seconds=lease / 10,
        capacity=streams + 10,
        sink=sink,
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        metrics_flush_seconds=worker_scale.FLUSH_SECONDS,
        health_file=str(ctx.work_dir / f"{name}.health"),
    )
    worker = WorkerProcess.start(settings, name, ctx.work_dir / f"{name}.log")
    try:
        _wait_started(worker)
        rss_empty = _rss_kib(worker.pid)
        ids = [f"{name}-{i:05d}" for i in range(streams)]
        worker_scale.seed(settings, ids, lambda s: f"ws://127.0.0.1:{port}/{s}?rate={rate:g}")
        ctx.progress.update(f"worker: {streams} streams at {rate:g} msg/s, {sink} sink", force=True)
        window = _measure(worker, streams, seconds, ramp_seconds=30 + streams * 0.06)
        rss_full = _rss_kib(worker.pid)
    finally:
        worker.stop(settings.shutdown_budget_seconds + 10)
    run = Run(
        f"worker (lease + checkpoint + {sink} sink)",
        streams,
        rate,
        window.messages,
        window.seconds,
        window.cpu_seconds,
        renewals=window.renewals,
        held=window.held_min,
        # Flat out, every socket's buffers are full: that is buffer, not the cost of a stream.
        rss_per_stream_kib=(rss_full - rss_empty) / max(1, window.held_min) if rate else None,
    )
    return run, window


def bare_run(port: int, sim_pid: int, streams: int, rate: float, seconds: float) -> Run:
    """The bare websockets client of :mod:`bench.upstream_throughput`, same simulator."""
    r = upstream_throughput.measure(
        BARE, port, sim_pid, streams=streams, rate=rate, duration=seconds
    )
    return Run(BARE, streams, rate, r.messages, r.seconds, r.cpu_seconds)


def run(ctx: BenchContext) -> list[Table]:
    """The throughput section: at N × 10 msg/s and flat out, bare client vs whole worker."""
    streams = 100 if ctx.quick else 1000
    seconds = 3.0 if ctx.quick else 15.0
    loads = [(streams, 10.0)] if ctx.quick else [(streams, 10.0), (FLAT_OUT_STREAMS, 0.0)]
    raise_open_file_limit()
    runs: list[tuple[Run, list[tuple[Run, Window]]]] = []
    with upstream_throughput.simulator_process() as (port, sim_pid):
        for n, rate in loads:
            ctx.progress.update(f"bare client: {n} streams at {rate:g} msg/s", force=True)
            bare = bare_run(port, sim_pid, n, rate, seconds)
            workers = [worker_run(ctx, port, n, rate, seconds)]
            if rate:
                ctx.shared["throughput_window"] = workers[0][1]
                workers.append(worker_run(ctx, port, n, rate, seconds, sink="kinesis"))
            runs.append((bare, workers))
    table = Table(
        "Throughput: one worker vs a bare websockets client (same simulator, same run; timers:"
        f" lease {THROUGHPUT_LEASE_SECONDS:g} s, heartbeat {THROUGHPUT_LEASE_SECONDS / 4:g} s,"
        " the rest production's)",
        [
            "load",
            "client",
            "msgs/s",
            "CPU µs/msg",
            "CPU % of a core",
            "worker / bare CPU per msg",
            "memory per held stream",
            "renewal lag max",
        ],
    )
    for bare, workers in runs:
        load = (
            f"{bare.streams:,} × {bare.rate:g} msg/s" if bare.rate else f"{bare.streams} × flat out"
        )
        table.add(
            load,
            bare.client,
            bare.per_second,
            bare.cpu_us_per_message,
            100 * bare.cpu_seconds / bare.seconds,
            None,
            None,
            None,
        )
        for worker, window in workers:
            rss = (
                None
                if worker.rss_per_stream_kib is None
                else f"{worker.rss_per_stream_kib:.0f} KiB"
            )
            client = worker.client
            if worker.held is not None and worker.held < worker.streams:
                client += f" — held only {worker.held:,} of {worker.streams:,} at times"
            table.add(
                load,
                client,
                worker.per_second,
                worker.cpu_us_per_message,
                100 * worker.cpu_seconds / worker.seconds,
                f"{worker.cpu_us_per_message / bare.cpu_us_per_message:.2f}×",
                rss,
                f"{window.lag_max:,.0f} ms",
            )
        if not bare.rate:
            table.notes.append(
                f"{load}: the worker read {workers[0][0].per_second / bare.per_second:.2f}× the"
                " messages per second of the bare client, each using a whole core."
            )
        if len(workers) == 2:
            null, kinesis = workers[0][0], workers[1][0]
            table.notes.append(
                f"{load}: the Kinesis sink costs"
                f" {kinesis.cpu_us_per_message / null.cpu_us_per_message:.2f}× the null sink's"
                f" CPU per message ({kinesis.per_second:,.0f} records/s stored, the local moto"
                " server answering the PutRecords calls)."
            )
    table.notes += [
        "CPU is user + system time of the client process over the window (100 % = one core);"
        " the worker's includes its renewals, keepalives and loops.",
        f"Worker: our defaults (sessions), lease {THROUGHPUT_LEASE_SECONDS:g} s / heartbeat"
        f" {THROUGHPUT_LEASE_SECONDS / 4:g} s here (kept from per-stream runs, where the local"
        " moto server could not renew 1,000 leases every 5 s); null sink; memory = resident-set"
        " growth from 0 to N streams / N.",
    ]
    return [table]
