"""Liveness: the worker's event loop touches a file every second; a checker judges its age.

``python -m worker.health`` is the container health check: exit 0 when the file named by
``Settings.health_file`` was touched within ``Settings.health_max_age_seconds`` and says nothing,
1 otherwise. A wedged event loop (blocked call, runaway coroutine) stops touching it, so ECS
replaces the task even though the process is still alive. A worker that knows it is sick — no
session renewal answered for several leases — writes why into the file
(:func:`mark_unhealthy`) before it leaves. This module imports nothing heavy: it runs every few
seconds in the container.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Final

MAX_REASON_CHARS: Final = 200


def touch(path: str) -> None:
    """Set ``path``'s modification time to now, creating the file if needed."""
    try:
        os.utime(path)
    except FileNotFoundError:
        with open(path, "a", encoding="utf-8"):
            pass


def reset(path: str) -> None:
    """Create ``path`` empty (healthy), or empty it: a new worker process starts healthy."""
    with open(path, "w", encoding="utf-8"):
        pass


def mark_unhealthy(path: str, reason: str) -> None:
    """Write ``reason`` (one line) into ``path``: the health check fails with it from now on."""
    with open(path, "w", encoding="utf-8") as out:
        out.write(reason.replace("\n", " ")[:MAX_REASON_CHARS] + "\n")


def unhealthy_reason(path: str) -> str | None:
    """What :func:`mark_unhealthy` wrote into ``path`` (None: nothing, or no file)."""
    try:
        with open(path, encoding="utf-8") as source:
            reason = source.read(MAX_REASON_CHARS + 1).strip()
    except FileNotFoundError:
        return None
    return reason or None


def age_seconds(path: str, now: float | None = None) -> float | None:
    """Seconds since ``path`` was last touched (wall clock), or None when it does not exist."""
    try:
        modified = os.stat(path).st_mtime
    except FileNotFoundError:
        return None
    return (time.time() if now is None else now) - modified


def is_fresh(path: str, max_age_seconds: float, now: float | None = None) -> bool:
    """True when ``path`` exists and was touched at most ``max_age_seconds`` ago."""
    age = age_seconds(path, now)
    return age is not None and age <= max_age_seconds


def main() -> int:
    """The health check command: 0 healthy, 1 stale or missing (reason on stderr)."""
    from streamlease.settings import Settings

    settings = Settings.from_env()
    age = age_seconds(settings.health_file)
    if age is None:
        print("unhealthy: no heartbeat file", file=sys.stderr)
        return 1
    reason = unhealthy_reason(settings.health_file)
    if reason is not None:
        print(f"unhealthy: {reason}", file=sys.stderr)
        return 1
    if age > settings.health_max_age_seconds:
        print(f"unhealthy: event loop silent for {age:.1f}s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
