"""``make test``: the whole suite in one command, in three phases.

1. Every test not marked ``serial`` (unit, moto, infra, the integration tests that measure no
   time) on parallel workers (pytest-xdist, ``-n`` ``STREAMLEASE_TEST_WORKERS``, default two a
   core: most of these tests wait on a server or a subprocess, so two cores keep four busy;
   measured: 4:45 with four workers, 5:44 with two), each with its own moto server, a test
   file at a time (all of ``tests/infra``, which shares one synth, on one worker:
   ``tests/conftest.py``).
2. The tests marked ``serial`` but not ``alone`` (chaos, the races between real processes, the
   tests of real workers on shrunk timers that assert invariants) in ``STREAMLEASE_TEST_LANES``
   lanes (default two): never beside the first phase's crowd, at most one other such test
   beside each; each waits for its events with generous caps, as it must on any busy machine.
   Measured on two cores: 431 s in one lane; in two lanes beside a busy loop 313-320 s, green.
3. The tests marked ``alone`` (a time is their evidence, or a worker starved past its lease
   would fail them: a release answered within a second, nothing abrupt in a drain) one at a
   time, with nothing of this run beside them, so the machine's load is the machine's.

Arguments are pytest's, given to every phase (``make test PYTEST_ARGS='-k lease'``); a ``-m``
expression is combined with each phase's. Each phase prints its own pytest summary; the last line
adds them up. Exits non-zero if any phase failed; 5 (no test ran) only if none ran one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TALLY_ENV = "STREAMLEASE_TEST_TALLY"
"""Where a phase's conftest writes its outcome counts (``tests/conftest.py``)."""
WORKERS_ENV = "STREAMLEASE_TEST_WORKERS"
LANES_ENV = "STREAMLEASE_TEST_LANES"
DEFAULT_LANES = 2
NO_TESTS = 5
SLOWEST = 20
"""Each phase lists its slowest tests (setup, call and teardown apart) unless the arguments
choose their own ``--durations``."""
OUTCOMES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")


def split_marker(args: list[str]) -> tuple[list[str], str | None]:
    """``args`` without its ``-m`` expression, and that expression (None: none given)."""
    rest: list[str] = []
    expression = None
    items = iter(args)
    for arg in items:
        if arg == "-m":
            expression = next(items, "")
        elif arg.startswith("-m") and len(arg) > 2:
            expression = arg[2:]
        else:
            rest.append(arg)
    return rest, expression


PHASES = {"parallel": "not serial", "lanes": "serial and not alone", "alone": "serial and alone"}
"""Each phase's own marker expression (an ``alone`` test is ``serial`` too)."""


def phase_marker(phase: str, expression: str | None) -> str:
    own = PHASES[phase]
    return own if not expression else f"({expression}) and {own}"


def run_phase(phase: str, args: list[str], expression: str | None, tally: Path) -> int:
    command = [sys.executable, "-m", "pytest", "-m", phase_marker(phase, expression)]
    if phase == "parallel":
        command += ["-n", os.environ.get(WORKERS_ENV) or str(2 * (os.cpu_count() or 1))]
    elif phase == "lanes":
        lanes = int(os.environ.get(LANES_ENV) or DEFAULT_LANES)
        command += ["-n", str(lanes) if lanes > 1 else "0"]  # 0: in this process, in turn
    else:
        command += ["-n", "0"]  # in this process, one test after another
    if not any(arg.startswith("--durations") for arg in args):
        command += [f"--durations={SLOWEST}"]  # where each phase's time goes, in every log
    print(f"\n=== make test, {phase} phase: {' '.join(command[3:] + args)}", flush=True)
    env = {**os.environ, TALLY_ENV: str(tally)}
    return subprocess.call([*command, *args], env=env)


def main(argv: list[str]) -> int:
    args, expression = split_marker(argv)
    started = time.monotonic()
    totals = dict.fromkeys(OUTCOMES, 0)
    codes: dict[str, int] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        for phase in PHASES:
            tally = Path(directory) / f"{phase}.json"
            phase_started = time.monotonic()
            codes[phase] = run_phase(phase, args, expression, tally)
            seconds[phase] = time.monotonic() - phase_started
            if tally.exists():
                for outcome, count in json.loads(tally.read_text()).items():
                    totals[outcome] = totals.get(outcome, 0) + count
    failed = {p: c for p, c in codes.items() if c not in (0, NO_TESTS)}
    shown = [f"{totals['passed']} passed", f"{totals['failed']} failed"]
    shown += [f"{totals[o]} {o}" for o in OUTCOMES[2:] if totals[o]]
    phases = ", ".join(f"{p} {seconds[p]:.0f} s (exit {codes[p]})" for p in codes)
    print(f"\nmake test, every phase ({phases}, {time.monotonic() - started:.0f} s in all):")
    print("total: " + ", ".join(shown), flush=True)
    if failed:
        return next(iter(failed.values()))
    return NO_TESTS if all(c == NO_TESTS for c in codes.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
