"""The first-data section: a fresh clone, ``make run``, one stream, the first record in the sink.

As a newcomer does it: clone the repository (its committed ``HEAD``) into a scratch directory,
run ``make run`` there (which creates ``.venv`` and installs the ``local`` extra), start one
stream with the ``streamlease`` command as soon as the banner says the stack is up, and stop
the clock when the stream's first record is in the sink file. Twice over: with pip's cache
left off (``PIP_NO_CACHE_DIR``: every wheel downloaded, a cold cache) and with it on (a warm
cache after the first run has filled it). The install, the stack's start and the first record
are reported apart. Nothing is asserted.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.common import Table
from bench.context import BenchContext
from bench.local_run import local_run, stack_environment
from local.supervisor import REPO_ROOT

BANNER: Final = "Next, in a second terminal"
RUNS: Final = 3
QUICK_RUNS: Final = 1
READY_SECONDS: Final = 600.0
RECORD_SECONDS: Final = 60.0
STREAM: Final = "demo-1"


@dataclass(frozen=True)
class FirstData:
    """One newcomer's run, in seconds from typing ``make run``."""

    installed: float
    ready: float
    first_record: float


def run(ctx: BenchContext) -> list[Table]:
    """Time the newcomer's first run, cold cache then warm, :data:`RUNS` times each."""
    runs = QUICK_RUNS if ctx.quick else RUNS
    results: dict[str, list[FirstData]] = {"cold": [], "warm": []}
    for cache in ("cold", "warm"):
        for n in range(runs):
            ctx.progress.update(f"{cache} cache, run {n + 1} of {runs}")
            results[cache].append(_newcomer(ctx.work_dir / f"first-data-{cache}-{n}", cache))
    table = Table(
        "First data from a fresh clone: `make run`, then `streamlease start`, until the first "
        "record is in the sink (seconds)",
        ["pip cache", "runs", "installed", "stack ready", "first record, median", "min – max"],
    )
    for cache, found in results.items():
        firsts = [r.first_record for r in found]
        table.add(
            "cold (PIP_NO_CACHE_DIR)" if cache == "cold" else "warm",
            len(found),
            statistics.median(r.installed for r in found),
            statistics.median(r.ready for r in found),
            statistics.median(firsts),
            f"{min(firsts):.1f} – {max(firsts):.1f}",
        )
    table.notes = [
        "installed: when make says so; stack ready: when the banner is printed; the stream is "
        "started at once (a newcomer types for a few seconds more).",
        f"pip's HTTP cache after the warm runs: {_cache_entries()} files "
        "(an index or mirror that answers without cache headers leaves it empty, and then a "
        "warm run downloads every wheel again, as a cold one does).",
    ]
    return [table]


def _newcomer(scratch: Path, cache: str) -> FirstData:
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    clone = scratch / "streamlease"
    subprocess.run(
        ["git", "clone", "--quiet", str(REPO_ROOT), str(clone)],
        check=True,
    )
    env = stack_environment(clone / ".local")
    if cache == "cold":
        env["PIP_NO_CACHE_DIR"] = "1"
    else:
        env.pop("PIP_NO_CACHE_DIR", None)
    log = scratch / "make-run.log"
    started = time.monotonic()
    with local_run(["make", "run"], clone, env, log) as stack:
        ready = _wait_for(lambda: BANNER in log.read_text(errors="replace"), READY_SECONDS)
        cli = clone / ".venv" / "bin" / "streamlease"
        subprocess.run(
            [str(cli), "--api", stack.api_url, "start", STREAM,
             f"{stack.upstream_url}/{STREAM}?rate=5"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        sink = stack.paths.sink_dir / f"{STREAM}.jsonl"
        first = _wait_for(lambda: sink.exists() and sink.stat().st_size > 0, RECORD_SECONDS)
    installed = re.search(r"installed in (\d+) s", log.read_text(errors="replace"))
    return FirstData(
        installed=float(installed.group(1)) if installed else float("nan"),
        ready=ready - started,
        first_record=first - started,
    )


def _wait_for(condition: Callable[[], bool], timeout_seconds: float) -> float:
    """Poll ``condition`` until true; returns the monotonic time it became true."""
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done within {timeout_seconds:g} s")
        time.sleep(0.05)
    return time.monotonic()


def _cache_entries() -> int:
    cache = Path(os.environ.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip")
    return sum(1 for path in cache.glob("http*/**/*") if path.is_file())
