"""``python -m bench [--quick] [--only SECTION ...]``: run the benchmarks, print the tables.

Every table is printed as markdown when its section ends, and the whole set is written with a
description of the machine to ``bench/results/latest.md`` (``--quick`` writes
``bench/results/quick.md`` instead, so a smoke run never overwrites the real figures).
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
from bench.context import BenchContext, bench_context

Section = Callable[[BenchContext], list[Table]]

SECTIONS: Final = {
    "failover": "bench.failover",
    "throughput": "bench.throughput",
    "write_cost": "bench.write_cost",
    "scale": "bench.scale",
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen sections; returns 0, or 1 if a section failed (the others still run)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a one-minute smoke run")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run only these sections")
    parser.add_argument("--out", type=Path, help="where to write the markdown results")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    names = args.only or list(SECTIONS)
    out = args.out or RESULTS_DIR / ("quick.md" if args.quick else "latest.md")
    progress = Progress(len(names))
    started = time.monotonic()
    header = [
        "# streamlease benchmarks",
        "",
        f"`python -m bench{' --quick' if args.quick else ''}` at revision {_git_revision()},"
        f" {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        *[f"- {line}" for line in machine_description()],
    ]
    tables: list[Table] = []
    failed = []
    with bench_context(args.quick, progress, keep=args.keep) as ctx:
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
