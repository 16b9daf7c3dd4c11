"""Waiting for a condition with a bound: the local stack, its resources and the tests all poll
this way (nothing sleeps a fixed time hoping things have happened)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ExitedWhileWaiting(RuntimeError):
    """What was waited for can no longer happen: its process exited first."""


def wait_until(
    condition: Callable[[], T],
    timeout_seconds: float,
    what: str,
    *,
    every_seconds: float = 0.1,
    alive: Callable[[], bool] | None = None,
) -> T:
    """Call ``condition`` every ``every_seconds`` until it returns something truthy; return that.

    ``alive``, if given, is asked after each unmet check (is the process that should make the
    condition true still running?). Raises :class:`ExitedWhileWaiting` as soon as it says no,
    ``TimeoutError`` naming ``what`` once ``timeout_seconds`` have passed.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        result = condition()
        if result:
            return result
        if alive is not None and not alive():
            raise ExitedWhileWaiting(f"{what}: exited while waiting")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_seconds:g} s")
        time.sleep(every_seconds)
