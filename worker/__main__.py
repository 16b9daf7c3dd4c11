"""``python -m worker``: one asyncio process holding streams until SIGTERM/SIGINT.

Exit status: 0 after a graceful drain, 1 when the shutdown budget ran out, 2 for a configuration
error (the message says which variable), 3 when no session renewal was answered for several
leases (:mod:`worker.liveness.session_keeper`: a replacement may fare better).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Final

from streamlease.errors import ConfigError
from streamlease.settings import Settings
from worker.app import run_worker

EXIT_CONFIG: Final = 2


def main() -> int:
    """Read the settings, run the worker on uvloop when it is installed, return the status."""
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"streamlease worker: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(run_worker(settings))
        return uvloop.run(run_worker(settings))
    except ConfigError as exc:  # found at start-up, e.g. a fleet running the other mode
        print(f"streamlease worker: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
