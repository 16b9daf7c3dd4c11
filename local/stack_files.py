"""Where the local stack keeps its files, and ``stack.json``: how others find a running stack.

Layout under ``Settings.local_state_dir`` (default ``.local/`` in the repository):
``sink/<stream id>.jsonl`` (the file sink), ``events/<worker>.jsonl`` (lease event logs),
``logs/<process>.log``, ``run/`` (worker health files, ``exits.jsonl``), ``stack.json`` while
a stack runs, and ``previous/`` holding the last run's files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any, Final

from local.supervisor import REPO_ROOT
from streamlease.settings import Settings

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
