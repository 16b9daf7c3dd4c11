"""The soak section: the local stack as ``make run`` runs it, many streams, an hour; does any
process of the stack grow?

The stack runs at production timers with :data:`STREAMS` streams at :data:`RATE` messages/s
each, started through the API as a user would. Every :data:`SAMPLE_SECONDS` the section reads
the resident memory of every process of the stack (moto, the API, the upstream simulator, the
supervisor and each worker). The first quarter of the run is warm-up (Python's allocator,
moto's tables, the workers' connections fill up); what a process gains over the remaining
three quarters is its growth, judged against :data:`GROWTH_LIMIT_MIB`. The local dashboard's
data is read at every sample, as a page left open would. A worker replaced
during the run is reported as such (its successor starts from nothing). Nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from typing import Final

from bench.common import Table
from bench.context import BenchContext
from bench.local_run import local_run, stack_environment
from local.dashboard import DATA_PATH
from local.supervisor import REPO_ROOT
from streamlease.cli.client import ApiClient

STREAMS: Final = 100
RATE: Final = 2
MINUTES: Final = 60.0
QUICK_MINUTES: Final = 3.0
SAMPLE_SECONDS: Final = 30.0
QUICK_SAMPLE_SECONDS: Final = 10.0
WARM_UP_SHARE: Final = 0.25
GROWTH_LIMIT_MIB: Final = 10.0
READY_SECONDS: Final = 120.0


def run(ctx: BenchContext) -> list[Table]:
    """Run the stack for the soak's duration and report each process's memory over it."""
    minutes = QUICK_MINUTES if ctx.quick else MINUTES
    every = QUICK_SAMPLE_SECONDS if ctx.quick else SAMPLE_SECONDS
    state = ctx.work_dir / "soak"
    env = stack_environment(state)
    samples: dict[str, list[tuple[float, int]]] = defaultdict(list)
    with local_run(
        [sys.executable, "-m", "local"], REPO_ROOT, env, ctx.work_dir / "soak-stack.log"
    ) as stack:
        stack.wait_ready(READY_SECONDS)
        client = ApiClient(stack.api_url)
        for n in range(1, STREAMS + 1):
            client.create_stream(f"soak-{n}", f"{stack.upstream_url}/soak-{n}?rate={RATE}")
        started = time.monotonic()
        end = started + minutes * 60
        while (now := time.monotonic()) < end:
            client.request("GET", DATA_PATH)  # someone watching the dashboard all along
            for name, kib in stack.memory_kib().items():
                samples[name].append((now - started, kib))
            moto = samples["moto"][-1][1] / 1024 if samples["moto"] else 0.0
            ctx.progress.update(
                f"{(now - started) / 60:.1f} of {minutes:g} min; moto {moto:.0f} MiB"
            )
            time.sleep(every)
        wanted = len(list(client.list_streams(state="STARTED")))
        owned = sum(1 for s in client.list_streams(state="STARTED") if s.get("owner"))
    return [_table(samples, minutes, every, wanted, owned)]


def _table(
    samples: dict[str, list[tuple[float, int]]],
    minutes: float,
    every: float,
    wanted: int,
    owned: int,
) -> Table:
    warm_up = minutes * 60 * WARM_UP_SHARE
    table = Table(
        f"Soak: the local stack (make run, production timers), {STREAMS} streams at {RATE} "
        f"msg/s for {minutes:g} min",
        [
            "process",
            "RSS after warm-up (MiB)",
            "RSS at the end (MiB)",
            f"growth over the last {minutes * (1 - WARM_UP_SHARE):g} min (MiB)",
            "per hour (MiB, fitted)",
            "max (MiB)",
            f"< {GROWTH_LIMIT_MIB:g} MiB",
        ],
    )
    for name in sorted(samples, key=lambda n: (n.startswith("worker"), n)):
        points = [(t, kib / 1024) for t, kib in samples[name] if t >= warm_up]
        if len(points) < 2:
            table.add(name, None, None, None, None, None, "replaced (too few samples)")
            continue
        growth = points[-1][1] - points[0][1]
        table.add(
            name,
            points[0][1],
            points[-1][1],
            growth,
            _slope_per_hour(points),
            max(mib for _, mib in points),
            "yes" if growth < GROWTH_LIMIT_MIB else "NO",
        )
    table.notes = [
        f"RSS from /proc every {every:g} s; the first "
        f"{WARM_UP_SHARE:.0%} of the run is warm-up. Growth: last sample minus the first "
        "after warm-up; per hour: least-squares slope over the same samples.",
        f"At the end {owned} of {wanted} wanted streams were owned. A worker that does not "
        "appear for the whole run was replaced (its successor is a row of its own).",
    ]
    return table


def _slope_per_hour(points: list[tuple[float, float]]) -> float:
    times = [t for t, _ in points]
    values = [v for _, v in points]
    slope = statistics.linear_regression(times, values).slope
    return slope * 3600
