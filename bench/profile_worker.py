"""Where a worker's CPU goes per message: one ``python -m worker``, measured, then profiled.

``python -m bench.profile_worker [--streams 1000] [--rate 10] [--seconds 15] [--sink null]
[--library websockets]``
starts a moto server and the upstream simulator (own process), seeds the streams and runs one
worker (:mod:`bench.profiled_worker`). Once it holds every stream and they all flow, two
windows of ``--seconds`` follow, the start-up left out of both:

1. *unprofiled*: the worker's CPU per message received, split between the event loop's thread
   (the data path, the loops) and the other threads (DynamoDB calls, the sink's stores,
   session renewals: the upkeep of held streams, which does not grow with their messages);
2. *profiled*: :mod:`cProfile` on the event loop's thread, the time summed by part of the worker
   (:data:`PARTS`: the WebSocket protocol, the transport, the sequencer, delivery, the sink,
   progress, keepalive, the event loop, ...) in µs per message, then the top functions by own
   time and by cumulative time — so a change to the data path can be judged by its profile, not
   by guesswork. The event loop's idle time (uvloop waits in C) is not in it: the profile
   starts inside a signal handler, with no frame of ours open that the wait could land on.

With ``--sink kinesis`` the records go to the moto server's Kinesis stream.

Not part of ``make bench``: a profiler slows what it measures (Python calls cost it most, so
the Python parts look larger than they are); the throughput section gives the figures, this
says where they come from.
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import profiled_worker, throughput, worker_scale
from bench.upstream_throughput import simulator_process
from local.moto_process import MotoProcess
from local.resources import create_resources
from local.worker_process import WorkerProcess, use_dummy_aws_credentials
from streamlease.settings import Settings, UpstreamLibrary
from worker.os_limits import raise_open_file_limit

LEASE_SECONDS = 60.0

PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("WebSocket library: frames, handshake, close", ("/websockets/", "/picows/")),
    (
        "transport: the library's glue, batches",
        (
            "stream/transport.py",
            "stream/websocket.py",
            "stream/picows_client.py",
            "stream/picows_errors.py",
        ),
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
    overall = sum(totals.values())
    print("| part | µs per message (profiled) | share |\n|---|---:|---:|")
    for name, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        per_message = seconds / max(1, messages) * 1e6
        print(f"| {name} | {per_message:.2f} | {seconds / overall:.0%} |")
    print(f"| all | {overall / max(1, messages) * 1e6:.2f} | 100% |")


def main(argv: list[str] | None = None) -> int:
    """Profile one worker; prints the profile. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile_worker", description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0, help="msg/s per stream; 0: flat out")
    parser.add_argument(
        "--seconds", type=float, default=15.0, help="each window: unprofiled, then profiled"
    )
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
            command=("-m", "bench.profiled_worker", str(out)),
        )
        try:
            ids = [f"prof-{i:05d}" for i in range(args.streams)]
            worker_scale.seed(
                settings, ids, lambda s: f"ws://127.0.0.1:{port}/{s}?rate={args.rate:g}"
            )
            # Measured, then profiled: each window starts once the streams flow (messages of
            # the metric flushes after its start only), the start-up left out of both.
            window = f"{args.seconds:g} s"
            print(f"measuring {window}, then profiling {window} ...", file=sys.stderr)
            ramp = 60 + args.streams * 0.06
            measured = throughput.measure(worker, args.streams, args.seconds, ramp_seconds=ramp)
            os.kill(worker.pid, profiled_worker.START)
            profiled = throughput.measure(worker, args.streams, args.seconds, ramp_seconds=0)
            os.kill(worker.pid, profiled_worker.STOP)
            deadline = time.monotonic() + 30
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            worker.stop(settings.shutdown_budget_seconds + 10)
    per_message = 1e6 / max(1, measured.messages)
    others = measured.other_threads_cpu_seconds
    main_thread = measured.cpu_seconds - others
    print(
        f"# Unprofiled, {measured.seconds:.0f} s: {measured.messages / measured.seconds:,.0f}"
        f" messages/s from {args.streams} streams; CPU {measured.cpu_seconds * per_message:.1f}"
        f" µs per message ({100 * measured.cpu_seconds / measured.seconds:.1f} % of a core): the"
        f" event loop's thread {main_thread * per_message:.1f}, the other threads"
        f" {others * per_message:.1f} (DynamoDB calls, the sink's stores, session renewals;"
        " cProfile does not see them)"
    )
    stats = pstats.Stats(str(out), stream=sys.stdout)
    print(
        f"# Profiled, the event loop's thread only, {profiled.seconds:.0f} s:"
        f" {profiled.messages:,} messages from {args.streams} streams"
    )
    print_parts(stats, profiled.messages)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
