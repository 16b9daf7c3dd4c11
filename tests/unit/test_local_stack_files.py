"""The local stack's state directory: one stack at a time, and what it tells a newcomer."""

from __future__ import annotations

import io
import json
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from local.__main__ import banner
from local.demo import closing_lines
from local.events import Console
from local.stack import LocalStack, StackError
from local.stack_files import StackPaths, StateDirBusy, StateDirLock
from streamlease.settings import Settings

HOLDER = {"pid": 4242, "ports": {"API": "127.0.0.1:8080", "moto": "127.0.0.1:5000"}}


def test_a_second_lock_on_the_directory_is_refused_with_the_holder(tmp_path: Path) -> None:
    """The lock is exclusive and says who holds it; released, it can be taken again."""
    paths = StackPaths(tmp_path / "state")
    first, second = StateDirLock(paths), StateDirLock(paths)
    first.acquire(HOLDER)
    with pytest.raises(StateDirBusy) as busy:
        second.acquire({"pid": 1})
    assert busy.value.holder == HOLDER
    assert not second.held
    first.release()
    second.acquire({"pid": 1})
    assert second.held
    second.release()


def test_the_lock_dies_with_its_holder(tmp_path: Path) -> None:
    """An OS lock: a stack killed with SIGKILL leaves no stale lock behind."""
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from local.stack_files import StackPaths, StateDirLock
        StateDirLock(StackPaths(Path({str(tmp_path)!r}))).acquire({{"pid": 1}})
        print("locked", flush=True)
        time.sleep(60)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(StateDirBusy):
            StateDirLock(StackPaths(tmp_path)).acquire({})
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        lock = StateDirLock(StackPaths(tmp_path))
        lock.acquire({})
        lock.release()
    finally:
        holder.kill()
        holder.wait()


def test_a_second_stack_touches_nothing_of_the_running_ones(tmp_path: Path) -> None:
    """A stack on a locked directory refuses before it moves, deletes or writes any file, and
    names the running stack's pid and ports."""
    paths = StackPaths(tmp_path)
    running = StateDirLock(paths)
    running.acquire(HOLDER)
    (tmp_path / "sink").mkdir()
    (tmp_path / "sink" / "s1.jsonl").write_text('{"seq": 1}\n')
    (tmp_path / "stack.json").write_text(json.dumps({"pid": 4242}))
    before = sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    settings = Settings(local_state_dir=str(tmp_path), local_api_port=1)
    second = LocalStack(settings, Console(io.StringIO()))
    try:
        with pytest.raises(StackError) as refused:
            second.start()
        second.stop()  # what `python -m local` does on the way out
        message = str(refused.value)
        assert "pid 4242" in message and "API on 127.0.0.1:8080" in message
        assert "STREAMLEASE_LOCAL_STATE_DIR" in message
        assert not second.holds_state_dir
        after = sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
        assert after == before
    finally:
        running.release()


def test_the_banners_example_url_is_quoted_for_every_shell(tmp_path: Path) -> None:
    """The ``?`` of the example URL is quoted (zsh would glob it and fail)."""
    stack = SimpleNamespace(
        settings=Settings(),
        paths=StackPaths(tmp_path),
        api_url="http://127.0.0.1:8080",
        upstream_url="ws://127.0.0.1:8765",
    )
    line = next(line for line in banner(stack) if "streamlease start" in line)
    assert line.strip() == "streamlease start demo-1 'ws://127.0.0.1:8765/demo-1?rate=5'"
    assert shlex.split(line)[-1] == "ws://127.0.0.1:8765/demo-1?rate=5"


INFO = {"sink_dir": "/s/sink", "events_dir": "/s/events", "state_dir": "/s", "pid": 1}


def test_the_demo_does_not_point_at_a_stack_it_stopped() -> None:
    """After stopping the stack it started, the demo says so and where the files are, and does
    not suggest ``streamlease ls``, which would find no API."""
    text = "\n".join(closing_lines(INFO, stack_stopped=True))
    assert "stopped now" in text and "/s/sink/" in text and "/s/previous/" in text
    assert "`streamlease ls` lists" not in text
    assert "make run" in text  # how to keep one running next time


def test_the_demo_on_a_running_stack_points_at_the_cli() -> None:
    """On the user's own running stack the demo leaves it up and says `streamlease ls`."""
    text = "\n".join(closing_lines(INFO, stack_stopped=False))
    assert "keeps running" in text and "`streamlease ls`" in text


def test_release_empties_the_lock_file(tmp_path: Path) -> None:
    """A released lock leaves no holder behind to be misreported later."""
    lock = StateDirLock(StackPaths(tmp_path))
    lock.acquire(HOLDER)
    lock.release()
    lock.release()  # safe to repeat
    assert (tmp_path / "stack.lock").read_text() == ""
