"""Where the local stack keeps its files, and ``stack.json``: how others find a running stack.

Layout under ``Settings.local_state_dir`` (default ``.local/`` in the repository):
``sink/<stream id>.jsonl`` (the file sink), ``events/<worker>.jsonl`` (lease event logs),
``logs/<process>.log``, ``run/`` (worker health files, ``exits.jsonl``), ``stack.json`` while
a stack runs, ``stack.lock`` (see :class:`StateDirLock`) and ``previous/`` holding the last
run's files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any, Final

from local.supervisor import REPO_ROOT
from streamlease.settings import Settings, env_name

_ROTATED: Final = ("sink", "events", "logs", "run")


@dataclasses.dataclass(frozen=True)
class StackPaths:
    """Where the stack keeps its files (``local_state_dir``; relative means in the repo)."""

    state_dir: Path

    @classmethod
    def for_settings(cls, settings: Settings) -> StackPaths:
        """Paths for ``settings.local_state_dir``."""
        state = Path(settings.local_state_dir).expanduser()
        return cls(state if state.is_absolute() else REPO_ROOT / state)

    @property
    def sink_dir(self) -> Path:
        """One JSONL file per stream (the file sink)."""
        return self.state_dir / "sink"

    @property
    def events_dir(self) -> Path:
        """One lease event log per worker process."""
        return self.state_dir / "events"

    @property
    def logs_dir(self) -> Path:
        """One log per child process."""
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        """Health files of the workers."""
        return self.state_dir / "run"

    @property
    def exits_file(self) -> Path:
        """Worker exits as the supervisor saw them (see :mod:`local.sink_report`)."""
        return self.run_dir / "exits.jsonl"

    @property
    def lock_file(self) -> Path:
        """``stack.lock``: locked by the stack that uses this directory (see
        :class:`StateDirLock`)."""
        return self.state_dir / "stack.lock"

    @property
    def stack_file(self) -> Path:
        """``stack.json``: where the running stack listens; gone once it stopped."""
        return self.state_dir / "stack.json"

    def write_stack_file(self, description: dict[str, Any]) -> None:
        """Write ``stack.json`` (replaced atomically, so a reader never sees half of it)."""
        partial = self.stack_file.with_suffix(".tmp")
        partial.write_text(json.dumps(description, indent=2), encoding="utf-8")
        partial.replace(self.stack_file)

    def rotate(self) -> bool:
        """Move the previous run's files to ``previous/`` (moto forgets everything between runs,
        so they describe streams that no longer exist). Returns True if anything was moved."""
        previous = self.state_dir / "previous"
        found = [self.state_dir / name for name in _ROTATED if (self.state_dir / name).exists()]
        if found:
            shutil.rmtree(previous, ignore_errors=True)
            previous.mkdir(parents=True)
            for path in found:
                path.rename(previous / path.name)
        for path in (self.sink_dir, self.events_dir, self.logs_dir, self.run_dir):
            path.mkdir(parents=True, exist_ok=True)
        return bool(found)


def read_stack_file(paths: StackPaths) -> dict[str, Any] | None:
    """What a running stack wrote to ``stack.json``, or None if no stack runs there."""
    try:
        data = json.loads(paths.stack_file.read_text(encoding="utf-8"))
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if isinstance(data, dict) else None


class StateDirBusy(Exception):
    """Another stack holds the state directory; ``holder`` is what it wrote about itself
    (``pid``, ``ports``; empty if it had not written yet). The message says what to do."""

    def __init__(self, state_dir: Path, holder: dict[str, Any]) -> None:
        ports = holder.get("ports")
        if not isinstance(ports, dict):
            ports = {}
        listening = ", ".join(f"{name} on {port}" for name, port in ports.items())
        who = f"pid {holder.get('pid', 'unknown')}" + (f"; {listening}" if listening else "")
        super().__init__(
            f"another local stack ({who}) is running on the state directory {state_dir}; "
            f"nothing was changed there. Stop it first (Ctrl-C in its terminal), or give this "
            f"one its own {env_name('local_state_dir')} and ports "
            f"({env_name('local_api_port')}, {env_name('local_moto_port')}, "
            f"{env_name('local_upstream_port')})"
        )
        self.state_dir = state_dir
        self.holder = holder


class StateDirLock:
    """An exclusive lock on a state directory, held for a stack's whole life.

    An OS file lock (``flock`` on ``stack.lock``): the kernel releases it when the holder
    exits, however it exits, so there is never a stale lock to clean up. The lock file holds
    the holder's pid and ports so that a second stack can say whom it met. Child processes do
    not inherit it (the descriptor is not inheritable).
    """

    def __init__(self, paths: StackPaths) -> None:
        self._paths = paths
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """True between :meth:`acquire` and :meth:`release`."""
        return self._fd is not None

    def acquire(self, holder: dict[str, Any]) -> None:
        """Lock the directory (created if missing) and record ``holder`` in the lock file.

        Raises :class:`StateDirBusy` at once, without waiting, when another process holds it.
        """
        self._paths.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._paths.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 1 << 16, 0).decode("utf-8", "replace")
            os.close(fd)
            raise StateDirBusy(self._paths.state_dir, _holder(text)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Empty the lock file and unlock. Safe to repeat."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the only descriptor releases the flock
        self._fd = None


def _holder(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
