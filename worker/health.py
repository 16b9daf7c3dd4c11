"""Liveness: the worker's event loop touches a file every second; a checker judges its age.

``python -m worker.health`` is the container health check: exit 0 when the file named by
``Settings.health_file`` was touched within ``Settings.health_max_age_seconds``, 1 otherwise.
A wedged event loop (blocked call, runaway coroutine) stops touching it, so ECS replaces the task
even though the process is still alive. This module imports nothing heavy: it runs every few
seconds in the container.
"""

from __future__ import annotations

import os
import sys
import time


def touch(path: str) -> None:
    """Set ``path``'s modification time to now, creating the file if needed."""
    try:
        os.utime(path)
    except FileNotFoundError:
        with open(path, "a", encoding="utf-8"):
            pass


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
    if age > settings.health_max_age_seconds:
        print(f"unhealthy: event loop silent for {age:.1f}s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
