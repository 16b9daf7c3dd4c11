"""The reaper and auditor Lambda handlers, run inside the local stack's own process.

Their logs and EMF metrics go to ``logs/lambdas.log`` instead of the console: the stack prints
one line per event, never raw JSON.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from local.lambda_context import LambdaContext


class LambdaHost:
    """Runs the reaper and auditor handlers in this process, their output in a log file.

    The Lambda modules read their settings when imported, so :meth:`load` must run after the
    environment holds the final settings.
    """

    def __init__(self, log_path: Path) -> None:
        self._log: IO[str] = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._reaper: Any = None
        self._auditor: Any = None

    def load(self) -> None:
        """Import the handlers (their loggers bind to the log file)."""
        with contextlib.redirect_stdout(self._log):
            import lambdas.auditor
            import lambdas.reaper

        self._reaper, self._auditor = lambdas.reaper, lambdas.auditor

    def reap(self, task_arn: str, stop_code: str) -> Mapping[str, Any]:
        """Call the reaper with an ECS "task stopped" event for ``task_arn``."""
        event = self._reaper.stopped_task_event(task_arn, stop_code=stop_code)
        with contextlib.redirect_stdout(self._log):
            result: Mapping[str, Any] = self._reaper.handler(
                event, LambdaContext("streamlease-reaper-local")
            )
        return result

    def audit(self) -> Mapping[str, Any]:
        """Call the auditor (a scheduled event); returns its numbers."""
        event = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
        with contextlib.redirect_stdout(self._log):
            result: Mapping[str, Any] = self._auditor.handler(
                event, LambdaContext("streamlease-auditor-local")
            )
        return result

    def close(self) -> None:
        """Close the log file."""
        self._log.close()
