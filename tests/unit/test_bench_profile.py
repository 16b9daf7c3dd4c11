"""The worker profile: its parts name code that exists (a moved module would otherwise leave its
time in "other" without a word), it covers only the window between its two signals, and it
tells the event loop's thread from the others."""

from __future__ import annotations

import os
import pstats
import signal
import sysconfig
import threading
import time
from pathlib import Path

from bench import profiled_worker
from bench.profile_worker import PARTS, part_of
from bench.worker_scale import thread_cpu_seconds

ROOT = Path(__file__).resolve().parents[2]


def stdlib_files() -> set[str]:
    """Names of the standard library's files (what a part may name besides our modules)."""
    names: set[str] = set()
    for _folder, dirs, files in os.walk(sysconfig.get_paths()["stdlib"]):
        dirs[:] = [d for d in dirs if d not in ("site-packages", "test", "__pycache__")]
        names.update(files)
    return names


def test_every_part_that_names_a_module_of_ours_names_one_that_exists() -> None:
    stdlib = stdlib_files()
    ours = [
        path
        for _, markers in PARTS
        for path in (marker.split(" ")[0] for marker in markers)
        if path.endswith(".py") and path.rsplit("/", 1)[-1] not in stdlib
    ]
    assert ours, "no part names a module of ours"
    for path in ours:
        found = [p for p in ROOT.glob("worker/**/*.py") if str(p).endswith(path)]
        assert found, f"{path} names no module of the worker"


def test_a_function_elsewhere_falls_to_its_part_or_to_other() -> None:
    assert part_of("/x/site-packages/websockets/frames.py", "parse").startswith("WebSocket")
    assert part_of("/x/worker/stream/picows_client.py", "on_ws_frame").startswith("transport")
    assert part_of("/x/somewhere/else.py", "f") == "other"


def test_the_profile_covers_only_what_ran_between_the_two_signals(tmp_path: Path) -> None:
    out = tmp_path / "worker.prof"

    def before() -> int:
        return sum(range(1000))

    def between() -> int:
        return sum(range(1000))

    def target() -> int:
        before()
        os.kill(os.getpid(), profiled_worker.START)
        between()
        os.kill(os.getpid(), profiled_worker.STOP)
        before()
        return 7

    assert profiled_worker.profiled(out, target) == 7
    called = {function for _, _, function in pstats.Stats(str(out)).stats}  # type: ignore[attr-defined]
    assert "between" in called
    assert "before" not in called
    assert signal.getsignal(profiled_worker.START) is signal.SIG_DFL  # left as it found them


def test_thread_cpu_is_split_between_the_main_thread_and_the_others() -> None:
    spun, release = threading.Event(), threading.Event()

    def spin() -> None:  # burns 0.2 s of its own CPU while the main thread waits for it
        while time.thread_time() < 0.2:
            sum(range(10_000))
        spun.set()
        release.wait()  # alive while it is measured: an ended thread's time leaves /proc/PID/task

    main_before, others_before = thread_cpu_seconds(os.getpid())
    thread = threading.Thread(target=spin)
    thread.start()
    spun.wait()
    main_after, others_after = thread_cpu_seconds(os.getpid())
    release.set()
    thread.join()
    assert others_after - others_before >= 0.15  # clock ticks: 10 ms each
    assert main_after - main_before < others_after - others_before
