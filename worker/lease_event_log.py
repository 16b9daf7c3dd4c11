"""Writes the lease event log: one JSON line per ownership change, for the invariant checker.

Off unless ``Settings.lease_event_log`` names a file. The line format, the kinds and what each
kind promises are :mod:`streamlease.lease_events`'s. Lines are written unbuffered to the kernel
(one ``write`` each), so a ``kill -9`` loses none.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import IO

from streamlease.lease_events import LeaseEvent, LeaseEventKind


class LeaseEventLog:
    """Appends lease events of one worker to a JSONL file (a no-op when ``path`` is empty)."""

    def __init__(self, path: str, worker_id: str) -> None:
        """Open ``path`` for appending (created with its directory if missing)."""
        self.worker_id = worker_id
        """The id events are recorded under unless a call names another."""
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        if path:
            directory = os.path.dirname(path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - held open

    @property
    def enabled(self) -> bool:
        """True when events are written somewhere."""
        return self._file is not None

    def record(
        self,
        kind: LeaseEventKind,
        stream_id: str,
        epoch: int,
        *,
        deadline_mono: float | None = None,
        mono: float | None = None,
        worker_id: str | None = None,
    ) -> None:
        """Append one event; ``mono`` defaults to now, ``worker_id`` to :attr:`worker_id`.
        Thread-safe. Never raises for a full disk: it drops."""
        if self._file is None:
            return
        event = LeaseEvent(
            event=kind,
            stream_id=stream_id,
            epoch=epoch,
            worker_id=self.worker_id if worker_id is None else worker_id,
            mono=time.monotonic() if mono is None else mono,
            wall_ms=time.time_ns() // 1_000_000,
            deadline_mono=deadline_mono,
        )
        # The log is evidence for tests and checkers, never a reason to stop streaming.
        text = json.dumps(event.to_dict(), separators=(",", ":")) + "\n"
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._file.write(text)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
