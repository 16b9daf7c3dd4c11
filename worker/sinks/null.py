"""A sink that stores nothing and counts (benchmarks, dry runs)."""

from __future__ import annotations

from collections.abc import Sequence

from streamlease.errors import SinkError
from worker.sinks.base import SinkRecord


class NullSink:
    """Accepts every record at once; ``records`` and ``batches`` count what it was given."""

    def __init__(self) -> None:
        self.records = 0
        self.batches = 0
        self._closed = False

    async def write(self, records: Sequence[SinkRecord]) -> None:
        """Count ``records``. Raises :class:`SinkError` after :meth:`close`."""
        if self._closed:
            raise SinkError("sink is closed")
        self.records += len(records)
        self.batches += 1

    async def close(self) -> None:
        """Refuse further writes."""
        self._closed = True
