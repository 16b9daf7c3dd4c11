"""Streams held by sessions that are gone: freed, so that they become orphans (architecture §4a).

A stream attached to a session has no expiry of its own: it is freed when its session's
tombstone is swept (:mod:`worker.liveness.takeover`) or by the reaper. If the session item itself is
gone while streams still hang on it — deleted by a fleet that ran per-stream leases before
those swept sessions, or by hand — nothing would ever sweep them, and they would stay owned by
nobody alive for good. So the fleet walks the streams held through sessions (a paged Scan of
``by-holder`` keeping those with a checkpoint slot; with per-stream leases only what a mode
switch left behind, so a page is usually empty), one turn per reconcile round: each round a
worker takes its turn with probability ``1 / live workers``, so the fleet as a whole takes about
one a round, whatever its size (with sessions every stream is such a stream, and a turn per
worker per round would cost as much as the sessions themselves). A turn reads the next
:func:`turn_entries` entries of the walk in small pages (:data:`PAGE_ITEMS`), one after the
other: the fleet's streams spread over the rounds of a lease, so the walk covers the fleet about
once a lease (the bound a gone session's streams are taken within), a fleet too large for that
in as many rounds as it takes; after a turn that freed streams the next reads as much as it may
(gone sessions' streams count in no worker's item, so the fleet's total leaves them out: a
mode switch can leave most of the table on them). Each owner on a page is read consistently,
once a turn (a page holds the streams of a few sessions; its acquire could have come from a
session created a moment ago, which an eventually consistent read could miss; the worker's role
has no batch read, and needs none), and each stream of an owner that is gone is freed
(condition: that owner and epoch, so a stream taken since is left alone) and handed off.

Nothing in the protocol leaves streams on a deleted session (a session is deleted only once
sweeps found it empty, long after its tombstone); this is the net under what did anyway: an
older version's mode switch, a session deleted by hand.

An owner that exists is none of this module's business: a live session keeps its streams, a
dead one is proven dead by its peers, an EXPIRED one is swept (:mod:`worker.liveness.fleet`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any, Final

from streamlease.errors import StoreError
from worker.context import WorkerContext
from worker.liveness.takeover import free_and_hand_off
from worker.logs import describe, logger
from worker.ownership.fleet_view import FleetView
from worker.ownership.rebalancer import jittered
from worker.ownership.reconciler import query_limit

PAGE_ITEMS: Final = 100
"""Entries one Scan request reads (a turn reads several): a page is parsed whole before its
streams are looked at, so this bounds what a turn holds at once, whatever the capacity."""


def turn_entries(capacity: int, total_streams: int, rounds_per_lease: int) -> int:
    """Entries one turn of the walk reads: the fleet's ``total_streams`` spread over the
    ``rounds_per_lease`` turns the fleet takes in a lease (about one a round), at least a page,
    at most :func:`~worker.ownership.reconciler.query_limit` of this worker's ``capacity``.
    Reading every entry every round would cost a fleet of 1,000 streams two Scan pages a second
    and about 12 read units per stream-hour for a net under what the protocol never does."""
    spread = -(-total_streams // max(1, rounds_per_lease))
    return min(query_limit(capacity), max(PAGE_ITEMS, spread))


class GoneSessions:
    """Walks the streams held through sessions and frees those whose session is gone."""

    def __init__(self, ctx: WorkerContext, view: FleetView) -> None:
        self._ctx = ctx
        self._view = view
        self._cursor: Mapping[str, Any] | None = None
        self._hurry = False
        """The last turn freed streams: read as much as this worker may until one frees none."""

    async def free_periodically(self) -> None:
        """Every ``reconcile_seconds`` (±20 %), this worker's turn with probability
        ``1 / live workers``. Until cancelled."""
        while True:
            if random.random() * max(1, self._view.live_workers) < 1:
                try:
                    await self.free_once()
                except StoreError as exc:  # the next round tries again
                    logger.info("gone sessions not read", error=describe(exc))
            await asyncio.sleep(jittered(self._ctx.settings.reconcile_seconds, random.random()))

    async def free_once(self) -> int:
        """Read this turn's entries (:func:`turn_entries`), in pages of at most
        :data:`PAGE_ITEMS`, each parsed and done with before the next is read (the worker's
        resident set keeps the high-water mark of what it parsed at once); the turn ends early
        where the walk does. Returns how many streams of gone sessions it freed. Raises
        :class:`StoreError` when a page or an owner cannot be read."""
        ctx = self._ctx
        settings = ctx.settings
        if self._hurry:
            left = query_limit(settings.capacity)
        else:
            left = turn_entries(
                settings.capacity,
                self._view.total_streams,
                int(settings.lease_seconds // settings.reconcile_seconds),
            )
        alive: dict[str, bool] = {}  # an owner's entries run on over pages: read it once a turn
        freed = 0
        while left > 0:
            limit = min(PAGE_ITEMS, left)
            left -= limit
            page, self._cursor = await asyncio.to_thread(
                ctx.store.held_through_sessions, limit=limit, start=self._cursor
            )
            for owner in {v.owner for v in page if v.owner is not None}:
                if owner != ctx.worker_id and owner not in alive:
                    alive[owner] = await asyncio.to_thread(ctx.sessions.read, owner) is not None
            for view in page:
                if view.owner is not None and alive.get(view.owner) is False:
                    freed += await self._free(view.stream_id, view.owner, view.epoch)
            if self._cursor is None:
                break  # the walk is over: the next turn starts it again
        self._hurry = freed > 0
        return freed

    async def _free(self, stream_id: str, owner: str, epoch: int) -> int:
        outcome = await free_and_hand_off(
            self._ctx, stream_id, owner, epoch, None, last_error=f"worker {owner}'s session is gone"
        )
        if outcome != "freed":
            return 0
        logger.warning("stream of a gone session freed", stream_id=stream_id, session=owner)
        return 1
