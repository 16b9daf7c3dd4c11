"""One worker holding many streams: CPU per message, CPU per renewal, renewal lag.

``python -m bench.worker_scale [--streams 500] [--rate 10] [--seconds 30] [--quick]``

Two runs of a single ``python -m worker`` process against a fresh local moto server and an
upstream simulator (in this process; the worker's CPU is read from ``/proc`` so the
simulator's own work does not count):

1. *idle*: N streams that send (almost) nothing → worker CPU per renewal (everything a held
   lease costs apart from its messages: renewal, keepalive, loops, divided by renewals);
2. *busy*: N streams at ``--rate`` msg/s → CPU per message, after taking off the idle cost.

Production timers (lease 20 s, heartbeat 5 s), null sink. Renewal lag (how late each renewal
was sent after its due time) comes from the worker's own per-interval summaries: p50 is the
median of the intervals' medians, p99 the worst interval's p99, max the overall maximum. The
renewal call time (write round trip) shows whether the store or the worker is the limit: the
serialised moto server answers ~180 DynamoDB requests/s on an idle core, fewer on a busy
machine, and a worker whose renewals fall a heartbeat behind stops taking streams and lets
the late leases fence (counted below) rather than overlap.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local.moto_process import MotoProcess
from local.resources import create_resources
from local.upstream_sim import UpstreamSimulator, run_in_thread
from local.worker_process import WorkerProcess, use_dummy_aws_credentials
from streamlease import aws
from streamlease.indexes import expiry_shard
from streamlease.schema import PK, DesiredState, StreamAttr, stream_key
from streamlease.settings import Settings
from worker.os_limits import raise_open_file_limit

FLUSH_SECONDS = 5.0
IDLE_RATE = 0.001
"""Messages per second of an "idle" stream (0 would mean flat out to the simulator)."""


@dataclass
class Window:
    """What one measuring window saw of the worker."""

    cpu_seconds: float
    messages: int
    renewals: int
    lag_p50s: list[float]
    lag_p99s: list[float]
    lag_max: float
    call_p50s: list[float]
    call_p99s: list[float]
    leases_lost: int
    held_at_end: int
    seconds: float
    held_min: int = 0
    """Fewest streams held at any flush of the window."""
    sessions_expired: int = 0
    loop_lag_max: float = 0.0
    """Worst event-loop lag of the window (ms)."""
    ramp_lag_max: float = 0.0
    """Worst renewal lag while the streams were being acquired, before the window (ms)."""
    ramp_seconds: float = 0.0
    """From the call until the worker held them all."""
    other_cpu_seconds: dict[str, float] = field(default_factory=dict)
    """CPU seconds of the other processes asked about (simulator, moto), same window."""
    log_span: tuple[int, int] = (0, 0)
    """Byte offsets of the worker's log (stdout + stderr) at the window's start and end."""


def _stat_cpu_seconds(stat: Path) -> float:
    """User + system CPU time in a ``/proc`` ``stat`` file (a process's or a thread's)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def thread_cpu_seconds(pid: int) -> tuple[float, float]:
    """User + system CPU time so far of process ``pid``'s main thread and of all its other
    threads together (Linux ``/proc``; a thread that ended since takes its time with it)."""
    main = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            seconds = _stat_cpu_seconds(task / "stat")
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        if task.name == str(pid):
            main += seconds
        else:
            others += seconds
    return main, others


def flush_lines(worker: WorkerProcess, seen: int) -> tuple[list[dict[str, Any]], int]:
    """New "metrics flushed" log records of ``worker`` after the first ``seen`` ones."""
    records = []
    for line in worker.log_path.read_text(errors="replace").splitlines():
        if '"metrics flushed"' in line:
            records.append(json.loads(line))
    return records[seen:], len(records)


class FlushTail:
    """The "metrics flushed" records of one worker's log, read incrementally (a log of
    thousands of acquisitions is not re-read every poll)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def new(self) -> list[dict[str, Any]]:
        """Records appended since the last call (complete lines only)."""
        try:
            with open(self._path, "rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        out = []
        for line in chunk[:end].splitlines():
            if b'"metrics flushed"' in line:
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out


def seed(settings: Settings, ids: list[str], url_for: Any) -> None:
    """Write STARTED, never-owned stream items, each in its shard of the orphan index as the
    API writes it (the reconciler finds them as orphans).

    Patient (30 s per answer, 5 attempts): a serialised moto server holding thousands of
    streams answers a write only after the queries ahead of it. Raises the client's error when
    even that fails."""
    dynamodb = aws.client("dynamodb", settings, read_timeout_seconds=30.0, max_attempts=5)

    def put(stream_id: str) -> None:
        dynamodb.put_item(
            TableName=settings.table_name,
            Item={
                PK: {"S": stream_key(stream_id)},
                StreamAttr.STREAM_ID: {"S": stream_id},
                StreamAttr.DESIRED_STATE: {"S": DesiredState.STARTED.value},
                StreamAttr.WS_URL: {"S": url_for(stream_id)},
                StreamAttr.LEASE_EXPIRES_AT_MS: {"N": "0"},
                StreamAttr.LEASE_EPOCH: {"N": "0"},
                StreamAttr.LAST_SEQ: {"N": "0"},
                StreamAttr.GENERATION: {"N": "1"},
                StreamAttr.EXPIRY_SHARD: {"S": expiry_shard(stream_id, settings.liveness)},
            },
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, ids))


def measure(
    worker: WorkerProcess,
    streams: int,
    seconds: float,
    *,
    tail: FlushTail | None = None,
    settle_seconds: float = 0.0,
    ramp_timeout_seconds: float = 120.0,
    others: Mapping[str, int] | None = None,
) -> Window:
    """Wait until ``streams`` are held (a flush says so), then ``settle_seconds`` more, then
    measure ``seconds`` (to the flushes inside them). ``tail``: the worker's flush reader,
    kept across calls; ``others``: name → pid of processes whose CPU is measured too. Raises
    ``RuntimeError`` when the worker does not hold them all within ``ramp_timeout_seconds``."""
    tail = tail or FlushTail(worker.log_path)
    started = time.monotonic()
    deadline = started + ramp_timeout_seconds
    ramp: list[dict[str, Any]] = []
    while not any(r.get("active_connections") == streams for r in ramp):
        if time.monotonic() > deadline or not worker.alive:
            held = max((r.get("active_connections", 0) for r in ramp), default=0)
            raise RuntimeError(
                f"worker held {held} of {streams} streams after"
                f" {time.monotonic() - started:.0f} s:\n{worker.log_tail()}"
            )
        time.sleep(0.2)
        ramp += tail.new()
    ramp_seconds = time.monotonic() - started
    settle_until = time.monotonic() + settle_seconds
    while time.monotonic() < settle_until:
        time.sleep(0.2)
        ramp += tail.new()
    pids = dict(others or {})
    start_cpu, start = cpu_seconds(worker.pid), time.monotonic()
    start_log = worker.log_path.stat().st_size
    start_others = {name: cpu_seconds(pid) for name, pid in pids.items()}
    records: list[dict[str, Any]] = []
    while time.monotonic() - start < seconds or not records:
        time.sleep(0.1)
        records += tail.new()
    end_cpu, end = cpu_seconds(worker.pid), time.monotonic()
    end_log = worker.log_path.stat().st_size
    # Align to flushes: the window covers the intervals flushed inside it.
    return Window(
        cpu_seconds=end_cpu - start_cpu,
        messages=sum(r["counters"]["MessagesReceived"] for r in records),
        renewals=sum(r["renewals"] for r in records),
        lag_p50s=[r["renewal_lag_ms_p50"] for r in records],
        lag_p99s=[r["renewal_lag_ms_p99"] for r in records],
        lag_max=max(r["renewal_lag_ms_max"] for r in records),
        call_p50s=[r["renewal_call_ms_p50"] for r in records],
        call_p99s=[r["renewal_call_ms_p99"] for r in records],
        leases_lost=sum(r["counters"]["LeasesLost"] for r in records),
        held_at_end=records[-1]["active_connections"],
        seconds=end - start,
        held_min=min(r["active_connections"] for r in records),
        sessions_expired=sum(r["counters"].get("SessionsExpired", 0) for r in records),
        loop_lag_max=max(r.get("loop_lag_ms_max", 0.0) for r in records),
        ramp_lag_max=max((r["renewal_lag_ms_max"] for r in ramp), default=0.0),
        ramp_seconds=ramp_seconds,
        other_cpu_seconds={
            name: cpu_seconds(pid) - start_others[name] for name, pid in pids.items()
        },
        log_span=(start_log, end_log),
    )


def run_once(
    base: Settings,
    sim: UpstreamSimulator,
    work: Path,
    name: str,
    streams: int,
    rate: float,
    seconds: float,
) -> Window:
    """Start a worker, give it ``streams`` streams at ``rate`` msg/s, measure, stop it."""
    settings = create_resources(base, prefix=f"bench-{name}-{os.getpid()}")
    settings = dataclasses.replace(
        settings,
        worker_id=f"bench-{name}/1-0000",
        capacity=streams + 10,
        sink="null",
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        metrics_flush_seconds=FLUSH_SECONDS,
        health_file=str(work / f"{name}.health"),
        poll_wait_seconds=20.0,
    )
    ids = [f"{name}-{i:05d}" for i in range(streams)]
    seed(settings, ids, lambda s: sim.url_for(s, rate=rate))
    worker = WorkerProcess.start(settings, name, work / f"{name}.log")
    try:
        return measure(worker, streams, seconds)
    finally:
        worker.stop(settings.shutdown_budget_seconds + 10)


def main(argv: list[str] | None = None) -> None:
    """Run both measurements and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--rate", type=float, default=10.0, help="messages/s per stream")
    parser.add_argument("--seconds", type=float, default=30.0, help="measuring window")
    parser.add_argument("--quick", action="store_true", help="50 streams, 10 s windows")
    args = parser.parse_args(argv)
    if args.quick:
        args.streams, args.seconds = 50, 10.0
    use_dummy_aws_credentials()
    raise_open_file_limit()
    work = Path(tempfile.mkdtemp(prefix="worker-scale-"))
    try:
        with MotoProcess.start() as moto, run_in_thread() as sim:
            base = Settings(aws_endpoint_url=moto.endpoint_url, aws_region="us-east-1")
            idle = run_once(base, sim, work, "idle", args.streams, IDLE_RATE, args.seconds)
            busy = run_once(base, sim, work, "busy", args.streams, args.rate, args.seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(report(args.streams, args.rate, idle, busy))


def report(streams: int, rate: float, idle: Window, busy: Window) -> str:
    """The results as a markdown table."""
    per_renewal = idle.cpu_seconds / max(1, idle.renewals)
    message_cpu = max(0.0, busy.cpu_seconds - per_renewal * busy.renewals)
    per_message = message_cpu / max(1, busy.messages)
    rows = [
        ("streams held", f"{streams}"),
        (
            "messages/s (busy run)",
            f"{busy.messages / busy.seconds:,.0f} (target {streams * rate:,.0f})",
        ),
        ("renewals/s", f"{busy.renewals / busy.seconds:,.1f}"),
        ("worker CPU, idle run", f"{100 * idle.cpu_seconds / idle.seconds:.1f} % of a core"),
        ("worker CPU, busy run", f"{100 * busy.cpu_seconds / busy.seconds:.1f} % of a core"),
        ("CPU per renewal (idle run, all held-lease costs)", f"{per_renewal * 1e6:,.0f} µs"),
        ("CPU per message", f"{per_message * 1e6:,.1f} µs"),
        ("renewal lag p50 (busy)", f"{statistics.median(busy.lag_p50s):.1f} ms"),
        ("renewal lag p99 (busy, worst interval)", f"{max(busy.lag_p99s):.1f} ms"),
        ("renewal lag max (busy)", f"{busy.lag_max:.1f} ms"),
        ("renewal lag p99 / max (idle)", f"{max(idle.lag_p99s):.1f} / {idle.lag_max:.1f} ms"),
        (
            "renewal call p50 / worst p99 (busy)",
            f"{statistics.median(busy.call_p50s):.1f} / {max(busy.call_p99s):.1f} ms",
        ),
        (
            "leases fenced in the window (busy / idle)",
            f"{busy.leases_lost} / {idle.leases_lost} (held at end: {busy.held_at_end})",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'measure':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
