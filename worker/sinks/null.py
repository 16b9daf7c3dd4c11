"""A sink that stores nothing and counts (benchmarks, dry runs).

It runs the same buffer as every built-in sink (:class:`~worker.sinks.base.BufferedSink`):
batches gather and are settled together, so a benchmark with it measures the whole data path
but the storage itself.
"""

from __future__ import annotations

from streamlease.errors import SinkError
from worker.sinks.base import (
    LINGER_SECONDS,
    BufferedSink,
    DeadlineClock,
    SinkBatch,
    deadline_passed_error,
)


class NullSink(BufferedSink):
    """Accepts every record; ``records`` and ``batches`` count what it was given, ``stores``
    how many times it was asked to store."""

    def __init__(self, *, linger_seconds: float = LINGER_SECONDS) -> None:
        super().__init__(linger_seconds=linger_seconds)
        self.records = 0
        self.batches = 0
        self.stores = 0

    async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        """Count ``batches``; one past its deadline fails with :class:`SinkDeadlinePassed`."""
        self.stores += 1
        clock = DeadlineClock()
        outcomes: list[SinkError | None] = []
        for batch in batches:
            if not clock.open(batch.deadline):
                outcomes.append(deadline_passed_error(batch.records))
                continue
            self.records += len(batch.records)
            self.batches += 1
            outcomes.append(None)
        return outcomes
