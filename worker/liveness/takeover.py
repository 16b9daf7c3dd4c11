"""Taking over a dead session's streams (architecture §4a), and sweeping what is left of one.

The worker that wrote a session's tombstone got its checkpoint vector with it. It lists the
session's streams in the ``by-holder`` index — eventually consistent, so until the list came back
empty twice — and for each stream, at exactly the dead owner and epoch:

- takes it (epoch + 1, resuming at the larger of the item's ``last_seq`` and the vector's entry
  for the same epoch) while it has room under its fair share;
- frees the rest with the same merged checkpoint and sends each a handoff command, so the other
  workers pick them up within a second instead of at the next reconcile. In a large fleet, whose
  fair share comes from the fleet digest a few seconds late, a sweep short of room first waits
  once for a fresher share (:attr:`Takeover.settle`): after a zone's loss the digest then counts
  the sessions that died together, and the streams are taken at once instead of freed.

Any worker runs the same sweep for an EXPIRED session seen for a heartbeat (a winner that died
mid-takeover, a drain that left something behind, the reaper's tombstones): every step is a
conditional write, so sweepers racing each other take or free each stream once. A tombstone is
deleted by the first sweep that finds it empty at least :data:`KEEP_TOMBSTONE_LEASES` leases
after it was written: a write to the session's streams still on its way (an acquire whose
answer was lost) lands long before, and is swept up.

Only streams attached to the session (those with a checkpoint slot) are swept: a per-stream
lease has a deadline of its own, which no verdict on its worker's item can shorten, and lapses
on its own. A per-stream fleet sweeps too, and frees every stream it finds (it cannot attach
one to a session): the streams a fleet left on its sessions before a switch to per-stream
leases become orphans, instead of staying held by sessions that are gone.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Final

from streamlease import checkpoints, rules
from streamlease.errors import StoreError
from streamlease.lease_store import wall_ms
from streamlease.model import LeaseView, WorkerInfo
from streamlease.schema import DesiredState, Liveness
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.logs import describe, logger
from worker.ownership.acquisition import Acquirer, DeadHolding, Outcome
from worker.ownership.fleet_view import FleetView
from worker.ownership.holdings import Holdings

PARALLEL_STEPS: Final = 8
"""Streams taken or freed at once during one takeover."""
EMPTY_READS: Final = 2
"""How many empty ``by-holder`` reads in a row end a sweep (the index is eventually consistent)."""
REREAD_SECONDS: Final = 0.2
"""Pause between ``by-holder`` reads of one sweep."""
MAX_ROUNDS: Final = 50
"""A sweep gives up after this many reads (it is tried again on the next fleet read)."""
KEEP_TOMBSTONE_LEASES: Final = 2.0


class Takeover:
    """Takes over or frees the streams of dead sessions, one sweep per session at a time."""

    def __init__(
        self, ctx: WorkerContext, acquirer: Acquirer, holdings: Holdings, view: FleetView
    ) -> None:
        self._ctx = ctx
        self._acquirer = acquirer
        self._holdings = holdings
        self._view = view
        self._busy: set[str] = set()
        self._parallel = asyncio.Semaphore(PARALLEL_STEPS)
        self._sessions = ctx.settings.liveness is Liveness.SESSION
        self.settle: Callable[[], Awaitable[None]] | None = None
        """Set by the fleet watcher: waits, once per sweep, for a fresher fair share before
        streams this worker has no room for are freed (in a large fleet the share comes from
        the digest, a few seconds behind a zone's loss)."""

    def busy_with(self, session_id: str) -> bool:
        """True while a sweep of ``session_id`` runs here."""
        return session_id in self._busy

    async def take_over(self, session: WorkerInfo) -> None:
        """Sweep ``session`` (a tombstone, read with its checkpoint vector); delete it once it
        is empty and old enough."""
        session_id = session.worker_id
        if session_id in self._busy:
            return
        self._busy.add(session_id)
        try:
            if await self._sweep(session_id, session.checkpoints):
                await self.delete_if_old(session)
        finally:
            self._busy.discard(session_id)

    async def delete_if_old(self, session: WorkerInfo) -> None:
        """Delete the tombstone ``session`` once it is :data:`KEEP_TOMBSTONE_LEASES` leases old."""
        keep_ms = KEEP_TOMBSTONE_LEASES * self._ctx.settings.lease_ms
        if wall_ms() - session.expired_at_ms < keep_ms:
            return
        try:
            await asyncio.to_thread(self._ctx.sessions.delete, session.worker_id)
        except StoreError as exc:
            logger.info("tombstone not deleted", session=session.worker_id, error=describe(exc))

    async def _sweep(self, session_id: str, vector: bytes | None) -> bool:
        """Take or free every stream still attached; True once it found none twice."""
        ctx = self._ctx
        entries = _decode(vector)
        empty = taken = freed = 0
        settle = self.settle  # once per sweep
        for _ in range(MAX_ROUNDS):
            try:
                views = await asyncio.to_thread(ctx.store.owned_by, session_id)
            except StoreError as exc:
                logger.info("sweep read failed", session=session_id, error=describe(exc))
                return False
            # Only what hangs on the session (a slot): a per-stream lease of the same worker
            # (the item of a per-stream worker is its session too) has a deadline of its own
            # that no verdict on the item shortens; it lapses and is taken by expiry.
            views = [v for v in views if v.slot is not None]
            if not views:
                empty += 1
                if empty >= EMPTY_READS:
                    break
                await asyncio.sleep(REREAD_SECONDS)
                continue
            empty = 0
            if settle is not None and self._room() < len(views):
                await settle()
                settle = None
            random.shuffle(views)
            async with asyncio.TaskGroup() as tasks:
                steps = [
                    tasks.create_task(
                        self._step(session_id, view, entries),
                        name=f"take over {view.stream_id} from session {session_id}",
                    )
                    for view in views
                ]
            taken += sum(1 for s in steps if s.result() == "taken")
            freed += sum(1 for s in steps if s.result() == "freed")
        else:
            logger.warning("sweep unfinished", session=session_id)
            return False
        if taken or freed:
            logger.info("session swept", session=session_id, taken=taken, freed=freed)
        return True

    async def _step(
        self, session_id: str, view: LeaseView, entries: list[checkpoints.Checkpoint | None]
    ) -> str:
        """Take or free one stream of the dead session; returns what happened."""
        entry = entries[view.slot] if view.slot is not None and view.slot < len(entries) else None
        resume = rules.checkpoint_for(entry, view.stream_id, view.epoch)
        async with self._parallel:
            if self._sessions and view.desired_state is DesiredState.STARTED and self._has_room():
                outcome = await self._acquirer.try_acquire(
                    view.stream_id,
                    source="takeover",
                    dead=DeadHolding(session_id, view.epoch, resume),
                )
                if outcome is Outcome.WON:
                    return "taken"
                if outcome not in (Outcome.NO_ROOM, Outcome.UNANSWERED, Outcome.HELD):
                    return "gone"
            return await self._free(session_id, view, resume)

    def _has_room(self) -> bool:
        return self._room() > 0

    def _room(self) -> int:
        """Streams this worker may still take: up to its fair share and its capacity."""
        holdings = self._holdings
        return max(0, min(holdings.free, max(1, self._view.share) - holdings.count))

    async def _free(self, session_id: str, view: LeaseView, resume: int | None) -> str:
        return await free_and_hand_off(
            self._ctx,
            view.stream_id,
            session_id,
            view.epoch,
            resume,
            last_error=f"worker {session_id} stopped renewing its session",
        )


async def free_and_hand_off(
    ctx: WorkerContext,
    stream_id: str,
    owner: str,
    epoch: int,
    resume: int | None,
    *,
    last_error: str,
) -> str:
    """Free a stream whose holder delivers no more (its session is dead, revoked or gone), at
    exactly ``owner`` and ``epoch`` (a stream taken since is left alone), resuming at least at
    ``resume``; then send its handoff if it is still wanted. Returns ``freed``, ``gone`` (not
    that holding any more) or ``unanswered``; never raises for a DynamoDB failure."""
    try:
        stream = await asyncio.to_thread(
            ctx.store.release_for, stream_id, owner, epoch, resume, last_error=last_error
        )
    except StoreError as exc:
        logger.info("release unanswered", stream_id=stream_id, error=describe(exc))
        return "unanswered"
    if stream is None:
        return "gone"
    ctx.metrics.incr(WorkerMetric.TAKEOVERS)  # the item counted one: a holder that did not release
    if ctx.settings.handoff_on_release and stream.desired_state is DesiredState.STARTED:
        await ctx.handoffs.send_handoff(stream_id, stream.generation)
    return "freed"


def _decode(vector: bytes | None) -> list[checkpoints.Checkpoint | None]:
    try:
        return checkpoints.decode(vector or b"")
    except ValueError:
        logger.warning("checkpoint vector unreadable: resuming from the stream items")
        return []
