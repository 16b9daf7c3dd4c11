"""Why the project runs its own moto launcher: the same lease races on stock moto and on ours.

Starts the stock ``moto.server``, then ``local.moto_server``, runs the acquire race and the
boundary race of ``tests/integration/test_lease_race.py`` against each, and prints one markdown
table. A demonstration, not a test: it asserts nothing.

    python -m bench.stock_moto_race [--leases 200] [--processes 4] [--threads 4]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.common import Table, machine_description
from local.moto_process import MotoProcess
from local.resources import create_resources
from streamlease import aws
from streamlease.settings import Settings

RACE_MODULE = Path(__file__).resolve().parents[1] / "tests" / "integration" / "test_lease_race.py"


def load_races() -> ModuleType:
    """The race harness, loaded from the test that uses it (one definition of the races)."""
    spec = importlib.util.spec_from_file_location("lease_race", RACE_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def stock_moto_server() -> Iterator[str]:
    """The stock ``moto.server`` on a free port; yields its endpoint URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client = aws.client("dynamodb", Settings(aws_endpoint_url=endpoint))
        deadline = time.monotonic() + 60
        while True:
            try:
                client.list_tables()
                break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
        yield endpoint
    finally:
        process.terminate()
        process.wait(10)


@contextlib.contextmanager
def our_moto_server() -> Iterator[str]:
    """Our serialised launcher on a free port; yields its endpoint URL."""
    with MotoProcess.start() as server:
        yield server.endpoint_url


def race_on(races: ModuleType, endpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run both races on the server at ``endpoint``; the counts for one table row."""
    base = Settings(aws_endpoint_url=endpoint)
    acquire_table = create_resources(base, prefix="race-acquire").table_name
    boundary_table = create_resources(base, prefix="race-boundary").table_name
    acquire = races.run_acquire_race(
        endpoint,
        acquire_table,
        leases=args.leases,
        processes=args.processes,
        threads=args.threads,
        contenders_per_process=args.contenders,
    )
    boundary = races.run_boundary_race(
        endpoint,
        boundary_table,
        streams=args.streams,
        processes=args.processes,
        lease_ms=args.lease_ms,
        duration_seconds=args.boundary_seconds,
    )
    return {
        "double": len(acquire.double_winners),
        "double_share": 100.0 * len(acquire.double_winners) / acquire.leases,
        "most": max(len(w) for w in acquire.winners.values()),
        "wrong": len(acquire.wrong_stored),
        "seconds": acquire.elapsed_seconds,
        "shared": len(boundary.shared_epochs),
        "overlaps": len(boundary.overlaps),
        "takeovers": boundary.takeovers,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stock_moto_race", description=__doc__)
    parser.add_argument("--leases", type=int, default=200)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--contenders", type=int, default=1, help="threads per process per lease")
    parser.add_argument("--streams", type=int, default=5, help="streams in the boundary race")
    parser.add_argument("--lease-ms", type=int, default=400)
    parser.add_argument("--boundary-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        os.environ.setdefault(name, value)

    races = load_races()
    contenders = args.processes * args.contenders
    table = Table(
        title="Lease races: stock moto vs. our serialised launcher",
        headers=[
            "server",
            "leases",
            "contenders per lease",
            "leases with 2+ winners",
            "share",
            "most winners of one lease",
            "stored owner ≠ winner",
            "acquire race s",
            "boundary: takeovers",
            "boundary: epochs with 2 owners",
            "boundary: overlapping leases",
        ],
    )
    for label, server in (
        ("stock moto_server", stock_moto_server),
        ("local.moto_server", our_moto_server),
    ):
        print(f"racing on {label} ...", file=sys.stderr, flush=True)
        with server() as endpoint:
            row = race_on(races, endpoint, args)
        table.add(
            label,
            args.leases,
            contenders,
            row["double"],
            f"{row['double_share']:.1f} %",
            row["most"],
            row["wrong"],
            row["seconds"],
            row["takeovers"],
            row["shared"],
            row["overlaps"],
        )
    table.notes.append(
        f"acquire race: {args.processes} processes × {args.threads} threads, expired leases; "
        f"boundary race: {args.streams} streams, lease {args.lease_ms} ms, "
        f"{args.boundary_seconds:g} s, holders renewing around expiry against takers."
    )
    table.notes.extend(machine_description())
    print(table.to_markdown())


if __name__ == "__main__":
    main()
