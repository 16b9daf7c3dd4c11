"""Rebalancing: recount the fleet, and shed streams when this worker holds far above its share.

Every ``fleet_recount_seconds`` (or ``rebalance_seconds`` if shorter) the worker lists the live
worker items and recomputes the fair share (:func:`worker.fleet.update_view`; the command poller
and the reconciler read it). Every ``rebalance_seconds`` (jittered), when it holds more than share +
slack, it hands off a few streams (release + handoff) that it has held for at least
``min_tenure_seconds``. A few at a time, so the fleet converges without a herd.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

from streamlease import rules
from worker.context import WorkerContext
from worker.fleet import FleetView, update_view
from worker.holder import EndReason, StreamHolder
from worker.holdings import Holdings
from worker.logs import describe, logger


def jittered(seconds: float, rand: float) -> float:
    """``seconds`` ± 20 % (``rand`` uniform in [0, 1)), so workers do not act in lockstep."""
    return seconds * (0.8 + 0.4 * rand)


def choose_to_shed(
    candidates: Sequence[tuple[str, float]],
    count: int,
    now_mono: float,
    min_tenure_seconds: float,
    rng: random.Random,
) -> list[str]:
    """Up to ``count`` stream ids, at random, among ``(stream id, acquired_mono)`` candidates
    held at least ``min_tenure_seconds``."""
    eligible = [
        stream_id
        for stream_id, acquired in candidates
        if rules.may_shed(acquired, now_mono, min_tenure_seconds)
    ]
    if count <= 0 or not eligible:
        return []
    return rng.sample(eligible, min(count, len(eligible)))


def recount_seconds(rebalance_seconds: float, fleet_recount_seconds: float) -> float:
    """How often the fleet view is recounted: every ``fleet_recount_seconds``, and at least as
    often as the rebalancer sheds."""
    return min(rebalance_seconds, fleet_recount_seconds)


class Rebalancer:
    """Keeps the fleet view current and sheds excess streams."""

    def __init__(self, ctx: WorkerContext, holdings: Holdings, view: FleetView) -> None:
        self._ctx = ctx
        self._holdings = holdings
        self._view = view
        self._rng = random.Random()

    async def rebalance_periodically(self) -> None:
        """Recount the fleet every :func:`recount_seconds` and shed every ``rebalance_seconds``
        (both jittered), until cancelled.

        Recounting more often than shedding is cheap (one query of a few worker items) and
        lets a worker notice a DRAINING peer soon: its share grows, it polls for the peer's
        handoffs instead of leaving them to the next reconcile round.
        """
        settings = self._ctx.settings
        recount = recount_seconds(settings.rebalance_seconds, settings.fleet_recount_seconds)
        next_shed = time.monotonic()
        while True:
            try:
                if time.monotonic() >= next_shed:
                    next_shed = time.monotonic() + jittered(
                        settings.rebalance_seconds, random.random()
                    )
                    await self.rebalance_once()
                else:
                    await self.refresh_view()
            except Exception as exc:  # the next round tries again
                logger.warning("rebalance failed", error=describe(exc))
            await asyncio.sleep(jittered(recount, random.random()))

    async def refresh_view(self) -> None:
        """Recount the fleet from the worker items. Raises StoreError when DynamoDB fails."""
        workers = await asyncio.to_thread(self._ctx.store.list_workers)
        update_view(self._view, workers, self._ctx.worker_id, self._holdings.active_count)

    async def rebalance_once(self) -> list[str]:
        """One round: recount, then shed what :func:`rules.streams_to_shed` says; returns the
        stream ids asked to go."""
        await self.refresh_view()
        ctx = self._ctx
        if ctx.shutdown_requested.is_set():
            return []
        settings = ctx.settings
        active: list[StreamHolder] = [h for h in self._holdings if h.is_active]
        count = rules.streams_to_shed(
            len(active), self._view.share, settings.rebalance_slack, settings.shed_batch
        )
        chosen = choose_to_shed(
            [(h.stream_id, h.acquired_mono) for h in active],
            count,
            time.monotonic(),
            settings.min_tenure_seconds,
            self._rng,
        )
        by_id = {h.stream_id: h for h in active}
        for stream_id in chosen:
            self._holdings.note_given_away(stream_id)
            by_id[stream_id].request_end(EndReason.SHED)
        if chosen:
            logger.info(
                "shedding streams",
                count=len(chosen),
                held=len(active),
                share=self._view.share,
                live_workers=self._view.live_workers,
            )
        return chosen
