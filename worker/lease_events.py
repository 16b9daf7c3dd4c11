"""The lease event log: one JSON line per ownership change, for the invariant checker.

Off unless ``Settings.lease_event_log`` names a file. Each line is
``{"event", "stream_id", "epoch", "worker_id", "mono", "wall_ms"}`` plus ``"deadline_mono"`` on
``acquired``/``renewed``/``session_renewed`` (until when the holder may deliver) and on
``fenced`` (the deadline that passed). ``mono`` is :func:`time.monotonic`, one clock for every
process of a Linux machine. ``worker_id`` is the holder's session id (a process that lost its
session continues under a new one).

What each event promises, so a checker can prove that no two holders overlapped:

- ``acquired``: the holder may deliver from ``mono`` until ``deadline_mono``;
- ``renewed``: the deadline moved to ``deadline_mono`` (a per-stream renewal that succeeded);
- ``session_renewed`` (no stream, epoch 0): the deadline of *every* stream attached to session
  ``worker_id`` moved to ``deadline_mono``;
- ``fenced``: the holder stopped delivering because its deadline passed (or it gave up before);
  nothing was delivered after ``mono``;
- ``lost``: DynamoDB said the lease is someone else's; nothing was delivered after ``mono``;
- ``stopped``: the stream was stopped; the holder stopped delivering (``released`` follows);
- ``released``: written after DynamoDB's release returned, delivery having ended before it;
- ``handoff``: a handoff command was sent after the release.

Lines are written unbuffered to the kernel (one ``write`` each), so a ``kill -9`` loses none.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from enum import StrEnum
from typing import IO, Any


class LeaseEvent(StrEnum):
    """Kinds of lease events."""

    ACQUIRED = "acquired"
    RENEWED = "renewed"
    SESSION_RENEWED = "session_renewed"
    FENCED = "fenced"
    RELEASED = "released"
    LOST = "lost"
    STOPPED = "stopped"
    HANDOFF = "handoff"


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
        event: LeaseEvent,
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
        line: dict[str, Any] = {
            "event": event.value,
            "stream_id": stream_id,
            "epoch": epoch,
            "worker_id": self.worker_id if worker_id is None else worker_id,
            "mono": time.monotonic() if mono is None else mono,
            "wall_ms": time.time_ns() // 1_000_000,
        }
        if deadline_mono is not None:
            line["deadline_mono"] = deadline_mono
        # The log is evidence for tests and checkers, never a reason to stop streaming.
        text = json.dumps(line, separators=(",", ":")) + "\n"
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._file.write(text)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
