"""A sink that stores nothing and counts (benchmarks, dry runs)."""

from __future__ import annotations

from collections.abc import Sequence

from streamlease.errors import SinkDeadlinePassed, SinkError
from worker.sinks.base import Deadline, SinkRecord


class NullSink:
    """Accepts every record at once; ``records`` and ``batches`` count what it was given."""

    def __init__(self) -> None:
        self.records = 0
        self.batches = 0
        self._closed = False

    async def write(self, records: Sequence[SinkRecord], deadline: Deadline) -> None:
        """Count ``records``. Raises :class:`SinkError` after :meth:`close`,
        :class:`SinkDeadlinePassed` past ``deadline``."""
        if self._closed:
            raise SinkError("sink is closed")
        if deadline.remaining_seconds() <= 0:
            raise SinkDeadlinePassed("fencing deadline passed", unsent=records)
        self.records += len(records)
        self.batches += 1

    async def close(self) -> None:
        """Refuse further writes."""
        self._closed = True
