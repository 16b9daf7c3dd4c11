"""``python -m bench.profiled_worker OUT``: the worker, its main thread profiled between signals.

:mod:`bench.profile_worker` runs the worker this way so that its profile covers the steady
state only, not the start-up (imports, connects, acquisitions) that would otherwise be spread
over the messages: SIGUSR1 switches :mod:`cProfile` on, SIGUSR2 switches it off and writes the
statistics to ``OUT``. The worker runs as ``python -m worker`` does; its exit status is the
worker's.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

START: signal.Signals = signal.SIGUSR1
STOP: signal.Signals = signal.SIGUSR2


def profiled(out: Path, target: Callable[[], int]) -> int:
    """Run ``target`` with :data:`START` and :data:`STOP` switching a profile of the main
    thread on and off (another :data:`START` adds to it; each :data:`STOP` rewrites ``out``).
    Returns what ``target`` returned."""
    profile = cProfile.Profile()

    def start(_signum: int, _frame: FrameType | None) -> None:
        profile.enable()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profile.disable()
        profile.dump_stats(out)

    signal.signal(START, start)
    signal.signal(STOP, stop)
    try:
        return target()
    finally:
        profile.disable()
        signal.signal(START, signal.SIG_DFL)
        signal.signal(STOP, signal.SIG_DFL)


def main(argv: list[str]) -> int:
    """``argv``: the statistics file. Returns the worker's exit status."""
    if len(argv) != 1:
        print("usage: python -m bench.profiled_worker OUT", file=sys.stderr)
        return 2
    from worker.__main__ import main as worker_main

    return profiled(Path(argv[0]), worker_main)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
