"""Where a worker's CPU goes per message: one ``python -m worker`` under cProfile.

``python -m bench.profile_worker [--streams 1000] [--rate 10] [--seconds 15] [--sink null]
[--library websockets]``
starts a moto server and the upstream simulator (own process), seeds the streams, runs one
worker under :mod:`cProfile` until it has received for ``--seconds``, stops it gracefully and
prints where the time went: first by part of the worker (:data:`PARTS`: the WebSocket protocol,
the transport, the sequencer, delivery, the sink, progress, keepalive, DynamoDB, the event
loop, ...) in µs per message, then the top functions by own time and by cumulative time — so a
change to the data path can be judged by its profile, not by guesswork. The event loop's idle
time (uvloop waits in C, unseen by cProfile, and the time lands on the holder's awaiting task)
is shown apart and left out of the total. With ``--sink
kinesis`` the records go to the moto server's Kinesis stream.

Not part of ``make bench``: a profiler slows what it measures (Python calls cost it most, so
the Python parts look larger than they are); the throughput section gives the figures, this
says where they come from.
"""

from __future__ import annotations

import argparse
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import worker_scale
from bench.upstream_throughput import simulator_process
from local.moto_process import MotoProcess
from local.resources import create_resources
from local.worker_process import WorkerProcess, use_dummy_aws_credentials
from streamlease.settings import Settings, UpstreamLibrary
from worker.os_limits import raise_open_file_limit

LEASE_SECONDS = 60.0

WAITING: str = "waiting: the event loop idle (see below)"
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # uvloop waits for the sockets in C, which cProfile does not see: that time lands on the
    # Python frame the loop resumes, the holder's task that awaits its end. Shown apart, and
    # left out of the per-message total.
    (WAITING, ("worker/ownership/holder.py run",)),
    ("WebSocket library: frames, handshake, close", ("/websockets/", "/picows/")),
    (
        "transport: the library's glue, batches",
        ("stream/transport.py", "stream/websocket.py", "stream/picows_client.py"),
    ),
    ("sequencer: orjson, dedupe, gaps", ("stream/sequence.py", "orjson")),
    (
        "delivery: fence check, batches, acks, checkpoint",
        ("stream/delivery.py", "/fence.py", "/slots.py"),
    ),
    ("sink: shared buffer and store", ("/sinks/",)),
    ("metrics", ("worker/metrics.py",)),
    (
        "progress and connection states",
        ("stream/progress.py", "/connection_report.py"),
    ),
    ("keepalive", ("stream/keepalive.py",)),
    ("link: connect, reconnect", ("stream/link.py", "stream/connection.py")),
    (
        "DynamoDB calls: renewals, progress, fleet (boto3)",
        (
            "botocore",
            "boto3",
            "urllib3",
            "http/client",
            "streamlease/",
            "/ssl.py",
            "/socket.py",
            "/json/",
        ),
    ),
    ("threads and the executor", ("threading.py", "concurrent/futures", "_thread")),
    ("logs (the bench's metric lines every second)", ("logging/", "TextIOWrapper", "/logs.py")),
    (
        "event loop: uvloop, asyncio, tasks",
        ("asyncio/", "uvloop", "run_forever", "_asyncio", "select.epoll", "runners.py"),
    ),
)
"""Parts of a worker, by where their code is (the first match wins; the rest is "other")."""


def part_of(filename: str, function: str) -> str:
    """The part of :data:`PARTS` a profiled function belongs to."""
    where = f"{filename} {function}"
    for name, markers in PARTS:
        if any(marker in where for marker in markers):
            return name
    return "other"


def print_parts(stats: pstats.Stats, messages: int) -> None:
    """Own time of every function, summed by part, in µs per message received."""
    totals: dict[str, float] = {}
    for (filename, _, function), row in stats.stats.items():  # type: ignore[attr-defined]
        own_seconds = row[2]
        name = part_of(filename, function)
        totals[name] = totals.get(name, 0.0) + own_seconds
    waiting = totals.pop(WAITING, 0.0)
    overall = sum(totals.values())
    print("| part | µs per message (profiled) | share |\n|---|---:|---:|")
    for name, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        per_message = seconds / max(1, messages) * 1e6
        print(f"| {name} | {per_message:.2f} | {seconds / overall:.0%} |")
    print(f"| all but waiting | {overall / max(1, messages) * 1e6:.2f} | 100% |")
    print(f"| {WAITING} | {waiting / max(1, messages) * 1e6:.2f} | – |")


def main(argv: list[str] | None = None) -> int:
    """Profile one worker; prints the profile. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile_worker", description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0, help="msg/s per stream; 0: flat out")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--sink", default="null", choices=["null", "kinesis", "file"])
    parser.add_argument(
        "--library",
        default=UpstreamLibrary.WEBSOCKETS.value,
        choices=[library.value for library in UpstreamLibrary],
        help="the upstream connections' WebSocket library",
    )
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    use_dummy_aws_credentials()
    raise_open_file_limit()
    work = Path(tempfile.mkdtemp(prefix="streamlease-profile-"))
    with MotoProcess.start() as moto, simulator_process() as (port, _):
        base = Settings(aws_endpoint_url=moto.endpoint_url, aws_region="us-east-1")
        settings = create_resources(base, prefix=f"profile-{uuid.uuid4().hex[:8]}")
        settings = Settings(
            **{
                **settings.__dict__,
                "worker_id": f"profile/1-{uuid.uuid4().hex[:4]}",
                "lease_seconds": LEASE_SECONDS,
                "heartbeat_seconds": LEASE_SECONDS / 4,
                "fence_margin_seconds": LEASE_SECONDS / 10,
                "capacity": args.streams + 10,
                "sink": args.sink,
                "upstream_library": UpstreamLibrary(args.library),
                "sink_dir": str(work / "sink"),
                "allow_insecure_ws": True,
                "allow_loopback_upstreams": True,
                "metrics_flush_seconds": worker_scale.FLUSH_SECONDS,
                "health_file": str(work / "health"),
            }
        )
        out = work / "worker.prof"
        worker = WorkerProcess.start(
            settings,
            "profiled",
            work / "worker.log",
            command=("-m", "cProfile", "-o", str(out), "-m", "worker"),
        )
        try:
            ids = [f"prof-{i:05d}" for i in range(args.streams)]
            worker_scale.seed(
                settings, ids, lambda s: f"ws://127.0.0.1:{port}/{s}?rate={args.rate:g}"
            )
            seen = 0
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # until the streams flow
                records, seen = worker_scale.flush_lines(worker, seen)
                if any(r["counters"]["MessagesReceived"] for r in records):
                    break
                time.sleep(0.5)
            print(f"profiling {args.seconds:g} s ...", file=sys.stderr)
            time.sleep(args.seconds)
            messages = 0
            records, seen = worker_scale.flush_lines(worker, 0)
            messages = sum(r["counters"]["MessagesReceived"] for r in records)
        finally:
            worker.stop(settings.shutdown_budget_seconds + 10)
    stats = pstats.Stats(str(out), stream=sys.stdout)
    print(f"# {messages} messages received over the whole run ({args.streams} streams)")
    print_parts(stats, messages)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
