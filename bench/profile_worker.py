"""Where a worker's CPU goes per message: one ``python -m worker`` under cProfile.

``python -m bench.profile_worker [--streams 10] [--rate 0] [--seconds 15] [--sink null]``
starts a moto server and the upstream simulator (own process), seeds the streams, runs one
worker under :mod:`cProfile` until it has received for ``--seconds``, stops it gracefully and
prints the top of the profile (by own time and by cumulative time) with the messages it
received, so a change to the data path can be judged by its profile, not by guesswork. With
``--sink kinesis`` the records go to the moto server's Kinesis stream.

Not part of ``make bench``: a profiler slows what it measures; the throughput section gives the
figures, this says where they come from.
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
from streamlease.settings import Settings
from worker.os_limits import raise_open_file_limit

LEASE_SECONDS = 60.0


def main(argv: list[str] | None = None) -> int:
    """Profile one worker; prints the profile. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile_worker", description=__doc__)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--rate", type=float, default=0.0, help="msg/s per stream; 0: flat out")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--sink", default="null", choices=["null", "kinesis", "file"])
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
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
