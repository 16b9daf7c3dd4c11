"""Once a heartbeat, read what the store says this worker holds (architecture §4a, "Stop"):
streams asked to stop and streams changed in place, in both liveness modes; with sessions also
streams owned but held by nobody and lost checkpoint slots.

A session's streams have no per-stream renewal that could fail with "STOPPED", so the worker
asks the ``by-holder`` index for its own streams every heartbeat: one query per worker and
heartbeat, a read (a fifth of a write's price) whatever the number of streams, whose filter
returns only the streams asked to stop (and counts the rest), so thousands of held streams cost
the worker no parsing. A stop reaches its holder within one heartbeat plus the index's
replication lag, and the holder then closes with 1000, writes the final checkpoint and releases.
The filter also lets through the STARTED streams whose generation is above the lowest this
session's holders use: a stream changed in place (``PATCH``) is among them, is read, and its
holder reconnects with the new settings under the same lease (:meth:`StreamHolder.change`).

Per-stream leases learn of a stop from their renewal, but a renewal says nothing of a change:
their worker runs the same read, under its own id, for the changes (and takes a stop it shows
as early as the renewal would). One query a heartbeat per worker, like a session's.

The same read counts the streams the store says this session owns. More than it holds means a
stream owned but held by nobody — an acquire whose answer was lost and whose write landed late
— or a release the index does not show yet: then the whole list is read, and a stream seen so
twice in a row (the index lags) is released (condition owner + epoch) and handed off.

Then the session's *lost* checkpoint slots (:mod:`worker.fencing.slots`) that are due are settled: a
consistent read of each one's stream; a slot its item no longer names is recovered. A session
whose lost slots leave it less than half its capacity asks to be rolled over (``on_rollover``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import Final

from streamlease.errors import LeaseLost, StoreError
from streamlease.model import LeaseView
from worker.context import WorkerContext
from worker.fencing.session import Session
from worker.logs import describe, logger
from worker.ownership.end_reason import EndReason
from worker.ownership.holdings import Holdings

SLOT_READS_PER_POLL: Final = 10
"""Most lost slots settled per poll (one consistent read each)."""


class OwnLeases:
    """Polls this worker's own streams: stops and changes; with sessions also streams owned
    but not held, and lost slots."""

    def __init__(
        self,
        ctx: WorkerContext,
        holdings: Holdings,
        on_rollover: Callable[[], None],
        *,
        sessions: bool = True,
    ) -> None:
        """``on_rollover``: called when the session should be replaced by a fresh one;
        ``sessions``: the worker's liveness mode (False: per-stream leases)."""
        self._ctx = ctx
        self._holdings = holdings
        self._on_rollover = on_rollover
        self._sessions = sessions
        self._strays: set[tuple[str, int]] = set()

    async def watch(self) -> None:
        """Poll every heartbeat (80–100 % of it, so a stop is seen within one) until cancelled."""
        heartbeat = self._ctx.settings.heartbeat_seconds
        while True:
            await asyncio.sleep(heartbeat * (0.8 + 0.2 * random.random()))
            try:
                await self.poll_once()
            except StoreError as exc:
                logger.info("own leases read failed", error=describe(exc))

    async def poll_once(self) -> list[str]:
        """One poll; returns the stream ids asked to stop."""
        ctx = self._ctx
        session = ctx.session
        if not self._sessions:
            owner = ctx.worker_id
        elif session is None or not session.live:
            return []
        else:
            owner = session.worker_id
        generations = [h.generation for h in self._holdings if h.owner == owner]
        owned = await asyncio.to_thread(
            ctx.store.stopped_of, owner, min(generations) if generations else None
        )
        stopping: list[str] = []
        for view in owned.stopped:
            holder = self._holdings.holder(view.stream_id)
            if (
                holder is not None
                and holder.owner == owner
                and holder.epoch == view.epoch
                and holder.is_active
            ):
                logger.info("stream stopped", stream_id=view.stream_id, epoch=view.epoch)
                holder.request_end(EndReason.STOPPED)
                stopping.append(view.stream_id)
        await self._apply_changes(owner, owned.changed)
        if not self._sessions or session is None:
            return stopping  # per-stream: an unheld stream's lease runs out by itself
        held = sum(1 for holder in self._holdings if holder.owner == owner)
        self._strays = await self._find_strays(owner) if owned.count > held else set()
        await self._settle_lost_slots(session)
        return stopping

    async def _apply_changes(self, owner: str, changed: Sequence[LeaseView]) -> None:
        """Streams whose generation moved past their holder's while STARTED: their URL or
        profile was changed in place. Each is read (consistently: the index does not carry the
        settings) and its holder reconnects with the new settings."""
        for view in changed:
            holder = self._holdings.holder(view.stream_id)
            if (
                holder is None
                or holder.owner != owner
                or holder.epoch != view.epoch
                or view.generation <= holder.generation
                or not holder.is_active
            ):
                continue
            try:
                stream = await asyncio.to_thread(self._ctx.store.read, view.stream_id)
            except StoreError as exc:
                logger.info(
                    "changed stream not read", stream_id=view.stream_id, error=describe(exc)
                )
                continue
            if stream is not None and stream.owner == owner and stream.epoch == holder.epoch:
                holder.change(stream)

    async def _settle_lost_slots(self, session: Session) -> None:
        """Recover the lost slots whose stream item no longer names them; ask for a rollover
        when too many stay lost."""
        slots = session.slots
        for slot, stream_id in slots.lost_due(time.monotonic())[:SLOT_READS_PER_POLL]:
            try:
                stream = await asyncio.to_thread(self._ctx.store.read, stream_id)
            except StoreError as exc:
                logger.info("lost slot not settled", stream_id=stream_id, error=describe(exc))
                return
            if stream is not None and stream.owner == session.worker_id and stream.slot == slot:
                continue  # still named: a stray, released above once seen twice
            slots.recover(slot, time.monotonic())
            logger.info(
                "checkpoint slot recovered", stream_id=stream_id, slot=slot, lost=slots.lost
            )
        capacity = self._ctx.settings.capacity
        if not session.retiring and slots.needs_rollover(capacity):
            logger.warning(
                "checkpoint slots lost: rolling the session over",
                lost=slots.lost,
                usable_capacity=slots.usable_capacity(capacity),
            )
            self._on_rollover()

    async def _find_strays(self, owner: str) -> set[tuple[str, int]]:
        """Streams the index lists as ``owner``'s that no holder holds; those seen so on the
        previous poll too are released."""
        views = await asyncio.to_thread(self._ctx.store.owned_by, owner)
        strays = {(v.stream_id, v.epoch) for v in views if v.stream_id not in self._holdings}
        for stream_id, epoch in strays & self._strays:
            await self._release_stray(owner, stream_id, epoch)
        return strays

    async def _release_stray(self, owner: str, stream_id: str, epoch: int) -> None:
        ctx = self._ctx
        logger.warning("stream owned but not held: releasing it", stream_id=stream_id, epoch=epoch)
        try:
            stream = await asyncio.to_thread(ctx.store.release, stream_id, owner, epoch)
        except (LeaseLost, StoreError) as exc:
            logger.info("stray release failed", stream_id=stream_id, error=describe(exc))
            return
        if stream is not None and ctx.settings.handoff_on_release and stream.awaits_a_holder:
            await ctx.handoffs.send_handoff(stream_id, stream.generation)
