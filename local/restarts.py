"""A part of the local stack that may die without ending the stack: restarted, and said so.

The upstream simulator plays the feeds outside the system: when it exits, the streams reconnect
with backoff (as they would to a real feed that went away) and the stack starts it again, so
moto's state, the API and the workers live on. Only a simulator that keeps exiting right after
it starts (its port taken, a broken install) ends the stack, as workers that cannot start do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from local.supervisor import MAX_FAILED_STARTS, STARTUP_GRACE_SECONDS, Child, exit_description

RESTARTED: Final = "restarted"
"""The console kind of a restart line."""


class RestartsFailing(RuntimeError):
    """The part keeps exiting right after it starts; ``tail`` is its log's end."""

    def __init__(self, child: Child, returncode: int) -> None:
        super().__init__(
            f"the {child.name} process keeps exiting right after it starts "
            f"({exit_description(returncode)})"
        )
        self.tail = child.tail()
        self.log_path = child.log_path


@dataclass
class Restarting:
    """Restarts ``child`` whenever it has exited; ``notify(kind, text)`` gets one line each
    time (``kind`` :data:`RESTARTED`). Call :meth:`poll` from the thread that started it."""

    child: Child
    what: str
    notify: Callable[[str, str], None]
    restarts: int = 0
    _failed_starts: int = 0

    def poll(self, now_mono: float | None = None) -> bool:
        """Restart the child if it has exited; True when it was restarted. Raises
        :class:`RestartsFailing` after :data:`MAX_FAILED_STARTS` exits in a row, each within
        :data:`STARTUP_GRACE_SECONDS` of its start."""
        returncode = self.child.poll()
        now = time.monotonic() if now_mono is None else now_mono
        if returncode is None:
            if now - self.child.started_mono >= STARTUP_GRACE_SECONDS:
                self._failed_starts = 0
            return False
        if now - self.child.started_mono < STARTUP_GRACE_SECONDS:
            self._failed_starts += 1
            if self._failed_starts >= MAX_FAILED_STARTS:
                raise RestartsFailing(self.child, returncode)
        old_pid = self.child.pid
        self.child.start()
        self.restarts += 1
        self.notify(
            RESTARTED,
            f"{self.what} (pid {old_pid}) {exit_description(returncode)}; started again as pid "
            f"{self.child.pid}: streams reconnect to it (log {self.child.log_path})",
        )
        return True
