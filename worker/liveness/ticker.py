"""The liveness ticker: the event loop proves every second that it still runs.

Each tick touches the health file that ``python -m worker.health`` (the container health check)
judges, measures how late the loop woke up (``EventLoopLagMs``) and calls the worker back, which
then refreshes its stream count and checks its session's fencing deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final

from streamlease.telemetry import WorkerMetric
from worker.health import reset, touch
from worker.logs import logger
from worker.metrics import WorkerMetrics

TICK_SECONDS: Final = 1.0
"""How often the loop proves it is alive (health file) and measures its own lag."""


async def tick(
    health_file: str, metrics: WorkerMetrics, on_lag: Callable[[float], None] | None = None
) -> None:
    """Every second: touch the health file and record how late the loop woke (EventLoopLagMs,
    and ``on_lag(seconds)``).

    Runs until cancelled; a failing health file is logged once, never fatal. The file starts
    empty: whatever a previous process wrote into it is no verdict on this one.
    """
    warned = False
    if health_file:
        with contextlib.suppress(OSError):  # touching it below warns
            reset(health_file)
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
