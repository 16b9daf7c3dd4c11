"""The stop-wait section: ``stop --wait`` and ``rm --wait`` of many streams on the local stack.

As an operator does it: ``make run``'s stack (production timers), :data:`STREAMS` streams
started with one ``streamlease start -f``, every one held, then ``streamlease stop --wait -f``
and ``streamlease rm --wait -f`` of the same file, each timed from the command's start to its
exit. Nothing is asserted. The stored figures (``bench/results/stop-wait.md``, which
docs/operating.md quotes) come from ``python -m bench --only stop_wait --out
bench/results/stop-wait.md``. (Before the streams were waited for together: 44.8 s for
``stop --wait`` of 100, each of 8 calls in flight waiting about a heartbeat; 7.9 s after.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from bench.common import Table
from bench.context import BenchContext
from bench.local_run import local_run, stack_environment
from local.supervisor import REPO_ROOT
from streamlease.cli.client import ApiClient

STREAMS: Final = 100
QUICK_STREAMS: Final = 20
RATE: Final = 1
READY_SECONDS: Final = 120.0
HELD_SECONDS: Final = 300.0


def run(ctx: BenchContext) -> list[Table]:
    """Start the streams, wait until all are held, then time ``stop --wait`` and ``rm --wait``."""
    count = QUICK_STREAMS if ctx.quick else STREAMS
    env = stack_environment(ctx.work_dir / "stop-wait")
    log = ctx.work_dir / "stop-wait-stack.log"
    with local_run([sys.executable, "-m", "local"], REPO_ROOT, env, log) as stack:
        stack.wait_ready(READY_SECONDS)
        lines = ctx.work_dir / "stop-wait-streams.jsonl"
        lines.write_text(
            "".join(
                json.dumps({"id": f"sw-{n}", "ws_url": f"{stack.upstream_url}/sw-{n}?rate={RATE}"})
                + "\n"
                for n in range(count)
            )
        )
        cli = [str(Path(sys.executable).with_name("streamlease")), "--api", stack.api_url]
        _cli([*cli, "start", "-f", str(lines)], env)
        ctx.progress.update(f"waiting for {count} streams to be held")
        _wait_held(ApiClient(stack.api_url), count)
        ctx.progress.update("stop --wait")
        stop = _timed([*cli, "stop", "--wait", "-f", str(lines)], env)
        _cli([*cli, "resume", "-f", str(lines)], env)
        _wait_held(ApiClient(stack.api_url), count)
        _cli([*cli, "stop", "-f", str(lines)], env)
        ctx.progress.update("rm --wait")
        rm = _timed([*cli, "rm", "--wait", "-f", str(lines)], env)
    table = Table(
        f"stop --wait and rm --wait of {count} held streams (local stack, production timers)",
        ["command", "streams", "seconds"],
    )
    table.add("stop --wait -f", count, stop)
    table.add("rm --wait -f (right after stop)", count, rm)
    table.notes = [
        "From the command's start to its exit: every request sent (8 in flight), then every "
        "stream still held looked at together until its holder lets go (one renewal).",
    ]
    return [table]


def _cli(argv: list[str], env: dict[str, str]) -> None:
    subprocess.run(argv, env=env, check=True, capture_output=True, cwd=REPO_ROOT)


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    _cli(argv, env)
    return time.monotonic() - started


def _wait_held(client: ApiClient, count: int) -> None:
    deadline = time.monotonic() + HELD_SECONDS
    while sum(1 for s in client.list_streams(state="STARTED") if s.get("owner")) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} streams not held within {HELD_SECONDS:g} s")
        time.sleep(1.0)
