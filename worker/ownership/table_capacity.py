"""Keeps :attr:`WorkerContext.table_write_units` current: the write units a second the lease
table can take at once for a handoff's writes, which bound how fast the fleet hands streams off.

Read once at start (:meth:`TableCapacity.refresh`, before the loops start) and every
``table_capacity_seconds`` ±20 % after (:meth:`TableCapacity.refresh_periodically`). The read
is one ``DescribeTable`` (:func:`streamlease.table_capacity.read_table_write_units`), a
control-plane call: minutes apart, a fleet of 1,250 workers makes about two a second. A failed
read keeps the last figure (before the first: a new on-demand table's) and logs an event.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from streamlease.errors import StoreError
from worker.context import WorkerContext
from worker.logs import describe, logger
from worker.ownership.rebalancer import jittered


class TableCapacity:
    """Reads the lease table's write units a second into the worker's context."""

    def __init__(self, ctx: WorkerContext, read: Callable[[], int]) -> None:
        """``read``: returns the table's figure (blocking; run in a thread), raises
        :class:`StoreError` when DynamoDB does not answer."""
        self._ctx = ctx
        self._read = read

    async def refresh(self) -> bool:
        """Read the figure into ``ctx.table_write_units``; True when read, False when the
        read failed (the last figure stays)."""
        ctx = self._ctx
        try:
            units = await asyncio.to_thread(self._read)
        except StoreError as exc:
            logger.warning(
                "table write units not read", error=describe(exc), kept=ctx.table_write_units
            )
            return False
        if units != ctx.table_write_units:
            logger.info("table write units changed", units=units, was=ctx.table_write_units)
        ctx.table_write_units = units
        return True

    async def refresh_periodically(self) -> None:
        """:meth:`refresh` every ``table_capacity_seconds`` (±20 %), until cancelled."""
        while True:
            seconds = self._ctx.settings.table_capacity_seconds
            await asyncio.sleep(jittered(seconds, random.random()))
            await self.refresh()
