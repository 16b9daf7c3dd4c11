"""This worker in the fleet: its worker item (heartbeat) and its view of everyone's load.

The worker item (``WORKER#<id>``) says the worker is alive, whether it is RUNNING or DRAINING,
and how many streams it holds; it expires ``worker_ttl_seconds`` after its last heartbeat, so a
crashed worker drops out of the live count by itself. Every worker derives the fair share from
the items of the others (:func:`count_fleet`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from streamlease import rules
from streamlease.lease_store import wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import WorkerState
from worker.context import WorkerContext
from worker.holdings import Holdings
from worker.logs import describe, logger


@dataclass
class FleetView:
    """What this worker last learned about the fleet (written by the rebalancer)."""

    share: int = 0
    """Fair share of streams per live worker; 0 until the first count."""
    live_workers: int = 1
    total_streams: int = 0
    orphans: int = 0
    """Streams wanted and unowned at the last reconcile (counted into the total)."""
    updated_mono: float = 0.0


def count_fleet(workers: Sequence[WorkerInfo], me: str, held: int, orphans: int) -> tuple[int, int]:
    """``(streams owned or wanted, live workers)`` from the worker items.

    Streams: this worker's ``held`` + every other worker's ``active_streams`` (a draining worker's
    too: they need a new home) + ``orphans``. Live workers: this one + the others that are
    RUNNING (a draining worker will hold nothing soon).
    """
    others = [w for w in workers if w.worker_id != me]
    total = held + orphans + sum(max(0, w.active_streams) for w in others)
    live = 1 + sum(1 for w in others if w.state is WorkerState.RUNNING)
    return total, live


def update_view(view: FleetView, workers: Sequence[WorkerInfo], me: str, held: int) -> None:
    """Recount ``view`` from the worker items (orphans as last seen by the reconciler)."""
    total, live = count_fleet(workers, me, held, view.orphans)
    view.total_streams = total
    view.live_workers = live
    view.share = rules.fair_share(total, live)
    view.updated_mono = time.monotonic()


class WorkerItem:
    """Publishes this worker's item: on start, every heartbeat, on DRAINING; removed on exit."""

    def __init__(self, ctx: WorkerContext, holdings: Holdings) -> None:
        self._ctx = ctx
        self._holdings = holdings
        self.state = WorkerState.RUNNING
        self._started_at_ms = wall_ms()

    def info(self, now_ms: int | None = None) -> WorkerInfo:
        """The item as of ``now_ms`` (default: now)."""
        now = wall_ms() if now_ms is None else now_ms
        identity = self._ctx.identity
        settings = self._ctx.settings
        return WorkerInfo(
            worker_id=identity.worker_id,
            state=self.state,
            heartbeat_at_ms=now,
            expires_at_ms=now + int(settings.worker_ttl_seconds * 1000),
            active_streams=self._holdings.active_count,
            capacity=settings.capacity,
            host=identity.host,
            pid=identity.pid,
            task_arn=identity.task_arn,
            version=identity.version,
            started_at_ms=self._started_at_ms,
        )

    async def publish(self) -> bool:
        """Write the item now; False (logged) when DynamoDB did not take it."""
        try:
            await asyncio.to_thread(self._ctx.store.put_worker, self.info())
        except Exception as exc:
            logger.warning("worker heartbeat failed", error=describe(exc))
            return False
        return True

    async def heartbeat(self) -> None:
        """Publish every ``worker_heartbeat_seconds`` until cancelled."""
        interval = self._ctx.settings.worker_heartbeat_seconds
        while True:
            await asyncio.sleep(interval)
            await self.publish()

    async def mark_draining(self) -> None:
        """Tell the fleet this worker is leaving (it stops counting as live at once)."""
        self.state = WorkerState.DRAINING
        await self.publish()

    async def remove(self) -> None:
        """Delete the item on a clean exit (failures are logged; the item expires anyway)."""
        try:
            await asyncio.to_thread(self._ctx.store.remove_worker, self._ctx.worker_id)
        except Exception as exc:
            logger.warning("worker item removal failed", error=describe(exc))
