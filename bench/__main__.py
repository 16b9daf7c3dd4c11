"""``python -m bench [--quick] [--scale S] [--only SECTION ...]``: run the benchmarks, print the
tables.

``--scale`` sets the scaled sections' timers (failover, write cost) to production's × S
(default 0.1: lease 2 s; write cost runs at 0.25 at least); every table's title says the timers
it was measured at.

Every table is printed as markdown when its section ends, and the whole set is written with a
description of the machine to ``bench/results/latest.md`` (``--quick`` writes
``bench/results/quick.md`` instead, so a smoke run never overwrites the real figures; an
``--only`` run writes ``build/bench-only.md``, so a part never stands for the whole run; the
sections that keep files of their own, such as ``cost.md``, still write them).
A progress line on stderr says what is running. Nothing here asserts anything about speed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from bench.common import RESULTS_DIR, Progress, Table, machine_description, write_results
from bench.context import DEFAULT_SCALE, MIN_SCALE, BenchContext, bench_context
from local.worker_process import PRODUCTION_LEASE_SECONDS

Section = Callable[[BenchContext], list[Table]]

SECTIONS: Final = {
    "lambda": "bench.lambda_imports",
    "failover": "bench.failover",
    "throughput": "bench.throughput",
    "write_cost": "bench.write_cost",
    "scale": "bench.scale",
    "rebalance": "bench.rebalance",
    "placement": "bench.placement_local",
    "cost": "bench.cost",
    "fleet_model": "bench.fleet_model",
    "first_data": "bench.first_data",
    "stop_wait": "bench.stop_wait",
    "soak": "bench.soak",
}
"""Section name → module with ``run(ctx) -> list[Table]``, in the order they run."""


def _git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def _section(name: str) -> Section:
    module = importlib.import_module(SECTIONS[name])
    run: Section = module.run
    return run


def _scale(text: str) -> float:
    """``--scale``: a number from :data:`MIN_SCALE` to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_SCALE <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from {MIN_SCALE:g} to 1, got {value:g}")
    return value


def command_line(quick: bool, scale: float, only: Sequence[str] | None = None) -> str:
    """The command that reproduces a run, as the results header shows it."""
    options = (
        (" --quick" if quick else "")
        + (f" --scale {scale:g}" if scale != DEFAULT_SCALE else "")
        + (f" --only {' '.join(only)}" if only else "")
    )
    return f"python -m bench{options}"


def default_out(quick: bool, only: bool) -> Path:
    """Where the tables go without ``--out`` (see the module docstring)."""
    if only:
        return RESULTS_DIR.parents[1] / "build" / "bench-only.md"
    return RESULTS_DIR / ("quick.md" if quick else "latest.md")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen sections; returns 0, or 1 if a section failed (the others still run)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a one-minute smoke run")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run only these sections")
    parser.add_argument("--out", type=Path, help="where to write the markdown results")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--scale",
        type=_scale,
        default=DEFAULT_SCALE,
        help=f"timers of the failover and write-cost sections as a fraction of production's"
        f" (default {DEFAULT_SCALE:g}: lease {PRODUCTION_LEASE_SECONDS * DEFAULT_SCALE:g} s;"
        f" at least {MIN_SCALE:g})",
    )
    args = parser.parse_args(argv)
    names = args.only or list(SECTIONS)
    out = args.out or default_out(args.quick, bool(args.only))
    progress = Progress(len(names))
    started = time.monotonic()
    header = [
        "# streamlease benchmarks",
        "",
        f"`{command_line(args.quick, args.scale, args.only)}` at revision {_git_revision()},"
        f" {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        *[f"- {line}" for line in machine_description()],
        f"- Timer scale: production × {args.scale:g} (lease"
        f" {PRODUCTION_LEASE_SECONDS * args.scale:g} s) for the failover and write-cost"
        " sections (write cost at 0.25 at least); every table's title says the timers it was"
        " measured at.",
    ]
    tables: list[Table] = []
    failed = []
    with bench_context(args.quick, progress, keep=args.keep, scale=args.scale) as ctx:
        for name in names:
            progress.section(name)
            section_start = time.monotonic()
            try:
                produced = _section(name)(ctx)
            except Exception as exc:  # one broken section must not hide the others' figures
                progress.clear()
                failed.append(name)
                traceback.print_exc(file=sys.stderr)
                first_line = (str(exc).splitlines() or [""])[0]
                produced = [
                    Table(f"{name}: failed", ["error"], [[f"{type(exc).__name__}: {first_line}"]])
                ]
            progress.update(f"done in {time.monotonic() - section_start:.0f} s", force=True)
            progress.clear()
            for table in produced:
                print(table.to_markdown() + "\n", flush=True)
            tables += produced
            write_results(out, header, tables)
    total = time.monotonic() - started
    header.append(f"- Total run time: {total:.0f} s")
    write_results(out, header, tables)
    print(f"results written to {out} ({total:.0f} s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
