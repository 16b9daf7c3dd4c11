"""The worker profile's parts name code that exists: a moved module or a renamed method would
otherwise leave its time in "other" (or count the idle loop as work) without a word."""

from __future__ import annotations

import inspect
import os
import re
import sysconfig
from pathlib import Path

from bench.profile_worker import PARTS, WAITING, part_of
from worker.ownership.holder import StreamHolder

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


def test_the_idle_loop_is_seen_on_the_holders_awaiting_method() -> None:
    (marker,) = dict(PARTS)[WAITING]
    module, function = marker.split(" ")
    source = inspect.getsourcefile(StreamHolder)
    assert source is not None and source.endswith(module)
    assert inspect.iscoroutinefunction(getattr(StreamHolder, function))
    assert part_of(source, function) == WAITING
    assert re.search(r"await self\._interruptibly\(", inspect.getsource(StreamHolder.run))


def test_a_function_elsewhere_falls_to_its_part_or_to_other() -> None:
    assert part_of("/x/site-packages/websockets/frames.py", "parse").startswith("WebSocket")
    assert part_of("/x/worker/stream/picows_client.py", "on_ws_frame").startswith("transport")
    assert part_of("/x/somewhere/else.py", "f") == "other"
