"""Process-level chores of the worker: file-descriptor limit, signals, liveness and loop lag."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
import time
from collections.abc import Callable
from typing import Final

from streamlease.telemetry import WorkerMetric
from worker.health import touch
from worker.logs import logger
from worker.metrics import WorkerMetrics

TICK_SECONDS: Final = 1.0
"""How often the loop proves it is alive (health file) and measures its own lag."""
MAX_OPEN_FILES: Final = 1 << 20


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (one socket per stream, plus files).

    Returns the soft limit now in force; never fails (a refusal keeps the old limit).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


def install_signal_handlers(
    loop: asyncio.AbstractEventLoop, on_first: Callable[[], None], on_second: Callable[[], None]
) -> None:
    """SIGTERM/SIGINT call ``on_first`` the first time and ``on_second`` after; nothing else
    happens in the handler (it only sets events)."""
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        logger.info("signal received", signal=signal.Signals(signum).name, count=received)
        if received == 1:
            on_first()
        else:
            on_second()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


async def tick(
    health_file: str, metrics: WorkerMetrics, on_lag: Callable[[float], None] | None = None
) -> None:
    """Every second: touch the health file and record how late the loop woke (EventLoopLagMs,
    and ``on_lag(seconds)``).

    Runs until cancelled; a failing health file is logged once, never fatal.
    """
    warned = False
    while True:
        if health_file:
            try:
                touch(health_file)
            except OSError:
                if not warned:
                    logger.warning("health file not writable")
                    warned = True
        started = time.monotonic()
        await asyncio.sleep(TICK_SECONDS)
        lag = max(0.0, time.monotonic() - started - TICK_SECONDS)
        metrics.observe(WorkerMetric.EVENT_LOOP_LAG_MS, lag * 1000.0)
        if on_lag is not None:
            on_lag(lag)
