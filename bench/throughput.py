"""Throughput: one whole worker against a bare websockets client, same simulator, same run.

The simulator runs in its own process (:func:`bench.upstream_throughput.simulator_process`).
Against it, alternated A/B/A/B/A/B/A (the machine is shared and drifts): the bare
``websockets`` client of :mod:`bench.upstream_throughput` (receive only, in this process), and
one ``python -m worker`` (a fresh one each window) holding the same number of streams with its
real lease, renewals + checkpoints and the ``null`` sink (measured the way
:mod:`bench.worker_scale` does: CPU from ``/proc``, messages from the worker's metric flushes).
Each worker window is compared with the mean of the bare windows on either side; the table
shows medians and ranges. Memory per held stream is the worker's resident-set growth from no
streams to N, divided by N. At N × 10 msg/s one more window has the worker write to the
``kinesis`` sink on the local moto server (batched PutRecords shared by every stream): what a
real sink adds per message.

The worker here renews every 15 s (lease 60 s): 1,000 streams at the production 5 s would need
200 renewals/s, more than the local moto server answers; renewal cost is the scale section's.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench import upstream_throughput, worker_scale
from bench.common import Table
from bench.context import BenchContext
from local.worker_process import WorkerProcess
from streamlease.settings import Settings, UpstreamLibrary
from worker.os_limits import raise_open_file_limit

THROUGHPUT_LEASE_SECONDS: Final = 60.0
FLAT_OUT_STREAMS: Final = 10
ROUNDS: Final = 3
"""Worker windows per load, each between two bare client windows."""
QUICK_ROUNDS: Final = 1
BARE: Final = upstream_throughput.BARE
LIBRARIES: Final = tuple(UpstreamLibrary)
"""The worker is measured on each upstream library, in turn within every round."""


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
    other_threads_cpu_seconds: float | None = None
    """CPU of the worker's threads besides its event loop's (None: not a worker)."""

    @property
    def per_second(self) -> float:
        """Messages per second over the window."""
        return self.messages / self.seconds if self.seconds else float("nan")

    @property
    def cpu_us_per_message(self) -> float:
        """Client CPU (user + system) per message, µs."""
        return self.cpu_seconds / self.messages * 1e6 if self.messages else float("nan")

    @property
    def other_threads_us_per_message(self) -> float:
        """The worker's CPU off its event loop's thread, per message, µs."""
        if self.other_threads_cpu_seconds is None or not self.messages:
            return float("nan")
        return self.other_threads_cpu_seconds / self.messages * 1e6


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
    other_threads_cpu_seconds: float
    """Of ``cpu_seconds``, what the threads besides the event loop's took."""


def measure(worker: WorkerProcess, streams: int, seconds: float, ramp_seconds: float) -> Window:
    """Like :func:`bench.worker_scale.measure`, but a worker that never holds all ``streams``
    (CPU-bound, fencing) is measured anyway, and the fewest streams it held is recorded: wait
    up to ``ramp_seconds`` for it to hold them all, then measure about ``seconds`` (whole metric
    flushes: only messages reported after the wait count)."""
    seen = 0
    deadline = time.monotonic() + ramp_seconds
    while True:
        new, seen = worker_scale.flush_lines(worker, seen)
        if time.monotonic() >= deadline or any(r.get("active_connections") == streams for r in new):
            break
        if not worker.alive:
            raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
        time.sleep(0.2)
    start_cpu, start = worker_scale.cpu_seconds(worker.pid), time.monotonic()
    _, start_threads = worker_scale.thread_cpu_seconds(worker.pid)
    records: list[dict[str, Any]] = []
    while time.monotonic() - start < seconds or not records:
        time.sleep(0.1)
        new, seen = worker_scale.flush_lines(worker, seen)
        records += new
    end_cpu, end = worker_scale.cpu_seconds(worker.pid), time.monotonic()
    _, end_threads = worker_scale.thread_cpu_seconds(worker.pid)
    return Window(
        cpu_seconds=end_cpu - start_cpu,
        messages=sum(r["counters"]["MessagesReceived"] for r in records),
        renewals=sum(r["renewals"] for r in records),
        lag_max=max(r["renewal_lag_ms_max"] for r in records),
        held_min=min(int(r.get("active_connections", 0)) for r in records),
        seconds=end - start,
        other_threads_cpu_seconds=end_threads - start_threads,
    )


def worker_run(
    ctx: BenchContext,
    port: int,
    streams: int,
    rate: float,
    seconds: float,
    sink: str = "null",
    run: int = 1,
    library: UpstreamLibrary = UpstreamLibrary.WEBSOCKETS,
) -> tuple[Run, Window]:
    """One worker on the upstream ``library`` holding ``streams`` streams at ``rate`` msg/s
    (0: flat out), writing to ``sink`` (``null``, or ``kinesis``: the local moto server's
    stream); ``run`` numbers the worker windows of one load (fresh resources each)."""
    name = f"tp{streams}-{library}-{sink}-{run}"
    lease = THROUGHPUT_LEASE_SECONDS
    settings = ctx.resources(
        name,
        worker_id=f"bench-{name}/1-{uuid.uuid4().hex[:4]}",
        lease_seconds=lease,
        heartbeat_seconds=lease / 4,
        fence_margin_seconds=lease / 10,
        capacity=streams + 10,
        sink=sink,
        upstream_library=library,
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
        ctx.progress.update(
            f"worker on {library}: {streams} streams at {rate:g} msg/s, {sink} sink", force=True
        )
        window = measure(worker, streams, seconds, ramp_seconds=30 + streams * 0.06)
        rss_full = _rss_kib(worker.pid)
    finally:
        worker.stop(settings.shutdown_budget_seconds + 10)
    run = Run(
        f"worker on {library} (lease + checkpoint + {sink} sink)",
        streams,
        rate,
        window.messages,
        window.seconds,
        window.cpu_seconds,
        renewals=window.renewals,
        held=window.held_min,
        # Flat out, every socket's buffers are full: that is buffer, not the cost of a stream.
        rss_per_stream_kib=(rss_full - rss_empty) / max(1, window.held_min) if rate else None,
        other_threads_cpu_seconds=window.other_threads_cpu_seconds,
    )
    return run, window


def bare_run(port: int, sim_pid: int, streams: int, rate: float, seconds: float) -> Run:
    """The bare websockets client of :mod:`bench.upstream_throughput`, same simulator."""
    r = upstream_throughput.measure(
        BARE, port, sim_pid, streams=streams, rate=rate, duration=seconds
    )
    return Run(BARE, streams, rate, r.messages, r.seconds, r.cpu_seconds)


@dataclass
class Alternation:
    """A/B/A/B/A...: bare client windows around every round of worker windows (one per
    library), one load, one run."""

    streams: int
    rate: float
    bares: list[Run] = field(default_factory=list)
    workers: dict[UpstreamLibrary, list[tuple[Run, Window]]] = field(default_factory=dict)

    @property
    def load(self) -> str:
        """The load as a table cell."""
        if self.rate:
            return f"{self.streams:,} × {self.rate:g} msg/s"
        return f"{self.streams} × flat out"

    def ratios(self, library: UpstreamLibrary, value: Callable[[Run], float]) -> list[float]:
        """Worker / bare for each worker window on ``library``, the bare figure being the mean
        of the two windows around its round (A/B/A: a drift of the machine cancels out)."""
        out = []
        for i, (worker, _) in enumerate(self.workers[library]):
            bare = statistics.fmean([value(self.bares[i]), value(self.bares[i + 1])])
            out.append(value(worker) / bare)
        return out


def alternate(
    ctx: BenchContext, port: int, sim_pid: int, streams: int, rate: float, seconds: float
) -> Alternation:
    """``rounds`` rounds of worker windows (one per library), each round between two bare
    client windows (shared between neighbours: A B B' A B B' A ...)."""
    rounds = QUICK_ROUNDS if ctx.quick else ROUNDS
    out = Alternation(streams, rate)
    for i in range(rounds + 1):
        ctx.progress.update(
            f"bare client {i + 1}/{rounds + 1}: {streams} streams at {rate:g} msg/s", force=True
        )
        out.bares.append(bare_run(port, sim_pid, streams, rate, seconds))
        if i < rounds:
            for library in LIBRARIES:
                window = worker_run(ctx, port, streams, rate, seconds, run=i + 1, library=library)
                out.workers.setdefault(library, []).append(window)
    return out


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min–max)`` of ``values``."""
    if len(values) == 1:
        return fmt.format(values[0])
    low, high = min(values), max(values)
    return f"{fmt.format(statistics.median(values))} ({fmt.format(low)}–{fmt.format(high)})"


def run(ctx: BenchContext) -> list[Table]:
    """The throughput section: at N × 10 msg/s and flat out, bare client vs whole worker,
    alternated A/B/A; then the Kinesis sink once."""
    streams = 100 if ctx.quick else 1000
    seconds = 3.0 if ctx.quick else 15.0
    loads = [(streams, 10.0)] if ctx.quick else [(streams, 10.0), (FLAT_OUT_STREAMS, 0.0)]
    raise_open_file_limit()
    alternations: list[Alternation] = []
    kinesis: tuple[Run, Window] | None = None
    with upstream_throughput.simulator_process() as (port, sim_pid):
        for n, rate in loads:
            alternations.append(alternate(ctx, port, sim_pid, n, rate, seconds))
        paced = alternations[0].workers[Settings().upstream_library]
        middle = sorted(paced, key=lambda w: w[0].cpu_us_per_message)[len(paced) // 2]
        ctx.shared["throughput_window"] = middle[1]
        kinesis = worker_run(ctx, port, streams, 10.0, seconds, sink="kinesis")
    return [_table(alternations, kinesis)]


def _table(alternations: list[Alternation], kinesis: tuple[Run, Window] | None) -> Table:
    rounds = len(next(iter(alternations[0].workers.values())))
    table = Table(
        "Throughput: one worker on each upstream library vs a bare websockets client (same"
        f" simulator, same run, alternated A/B/A: {rounds} rounds of worker windows between"
        f" {rounds + 1} bare ones; timers: lease {THROUGHPUT_LEASE_SECONDS:g} s, heartbeat"
        f" {THROUGHPUT_LEASE_SECONDS / 4:g} s, the rest production's)",
        [
            "load",
            "client",
            "msgs/s",
            "CPU µs/msg",
            "of it off the event loop",
            "CPU % of a core",
            "worker / bare",
            "memory per held stream",
            "renewal lag max",
        ],
    )
    for alt in alternations:
        bare_cpu = [b.cpu_us_per_message for b in alt.bares]
        table.add(
            alt.load,
            BARE,
            _spread([b.per_second for b in alt.bares], "{:,.0f}"),
            _spread(bare_cpu, "{:.1f}"),
            None,
            _spread([100 * b.cpu_seconds / b.seconds for b in alt.bares], "{:.1f}"),
            None,
            None,
            None,
        )
        for library, windows in alt.workers.items():
            _add_worker_row(table, alt, library, windows)
    if kinesis is not None:
        run, window = kinesis
        paced = alternations[0]
        default = paced.workers[Settings().upstream_library]
        null = statistics.median(w.cpu_us_per_message for w, _ in default)
        table.add(
            paced.load,
            run.client,
            run.per_second,
            run.cpu_us_per_message,
            run.other_threads_us_per_message,
            100 * run.cpu_seconds / run.seconds,
            f"{run.cpu_us_per_message / null:.2f}× the null sink's CPU/msg",
            None if run.rss_per_stream_kib is None else f"{run.rss_per_stream_kib:.0f} KiB",
            f"{window.lag_max:,.0f} ms",
        )
        table.notes.append(
            f"{paced.load}, Kinesis sink: one window, {run.per_second:,.0f} records/s stored (the"
            " local moto server answers PutRecords one call at a time)."
        )
    table.notes += [
        "Figures are the median of the windows, the range in brackets; worker / bare is taken"
        " per worker window against the mean of the bare windows on either side of it.",
        "CPU is user + system time of the client process over the window (100 % = one core);"
        " the worker's includes its session renewals, keepalive, connection-state writer and"
        " loops. Flat out, msgs/s is the comparable figure (each client uses what CPU it gets).",
        "Off the event loop: the part of the worker's CPU per message taken by its other threads"
        " — the DynamoDB calls of its upkeep (session renewals, progress writes, the fleet and"
        " gone-session reads) and the sink's stores; the upkeep grows with the streams held, not"
        " with their messages.",
        "Each round measures the worker on every upstream library in turn (websockets' sans-I/O"
        " client, picows); the Kinesis window runs the default library.",
        f"Worker: our defaults (sessions), lease {THROUGHPUT_LEASE_SECONDS:g} s / heartbeat"
        f" {THROUGHPUT_LEASE_SECONDS / 4:g} s here (kept from per-stream runs, where the local"
        " moto server could not renew 1,000 leases every 5 s); null sink unless stated (it runs"
        " the same batching as every built-in sink, storing nothing); memory = resident-set"
        " growth from 0 to N streams / N.",
        "Goals: CPU per message at 1,000 × 10 msg/s ≤ 1.0× the bare client's; flat-out msgs/s"
        " ≥ 1.0× the bare client's; ≤ 18 KiB per held stream; renewal lag max 0 ms.",
    ]
    return table


def _add_worker_row(
    table: Table, alt: Alternation, library: UpstreamLibrary, windows: list[tuple[Run, Window]]
) -> None:
    """The row of the worker on ``library`` at ``alt``'s load."""
    runs = [w for w, _ in windows]
    if alt.rate:
        ratio = f"CPU/msg {_spread(alt.ratios(library, lambda r: r.cpu_us_per_message))}×"
    else:
        ratio = f"msgs/s {_spread(alt.ratios(library, lambda r: r.per_second))}×"
    memory = [w.rss_per_stream_kib for w in runs if w.rss_per_stream_kib is not None]
    held = min(w.held if w.held is not None else w.streams for w in runs)
    client = runs[0].client
    if held < alt.streams:
        client += f" — held only {held:,} of {alt.streams:,} at times"
    table.add(
        alt.load,
        client,
        _spread([w.per_second for w in runs], "{:,.0f}"),
        _spread([w.cpu_us_per_message for w in runs], "{:.1f}"),
        _spread([w.other_threads_us_per_message for w in runs], "{:.1f}"),
        _spread([100 * w.cpu_seconds / w.seconds for w in runs], "{:.1f}"),
        ratio,
        f"{_spread(memory, '{:.1f}')} KiB" if memory else None,
        f"{max(window.lag_max for _, window in windows):,.0f} ms",
    )
