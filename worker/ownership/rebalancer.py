"""Rebalancing: shed streams when this worker carries far above its part (architecture §10).

The fleet's figures come from the fleet watcher (:mod:`worker.liveness.fleet`, recounted every
second). Every ``rebalance_seconds`` (jittered) a worker above the fleet's mean load + slack
hands off the streams that close its gap in the fewest moves; without load figures, a worker
holding more than share + slack hands off its excess, and goes on down to the share until a
few rounds in a row moved nothing (:func:`~streamlease.placement.giver_slack`). Only streams held at
least ``min_tenure_seconds`` move; a worker sheds at most its part of what the receivers lack
(a stream shed when nobody can take it only moves the imbalance) and at most
:data:`~streamlease.placement.MAX_SHED_FRACTION` of its capacity per round, less when the
fleet's pace binds (:func:`~streamlease.placement.fleet_moves_per_second`: the table's write
throughput and the orphan index's shards), and each handoff is marked for the receivers
(:class:`~streamlease.commands.Command` ``rebalance``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

from streamlease import placement, rules
from streamlease.indexes import expiry_shards
from worker.context import WorkerContext
from worker.logs import describe, logger
from worker.ownership.end_reason import EndReason
from worker.ownership.fleet_view import FleetView
from worker.ownership.holder import StreamHolder
from worker.ownership.holdings import Holdings


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
    eligible = past_tenure(candidates, now_mono, min_tenure_seconds)
    if count <= 0 or not eligible:
        return []
    return rng.sample(eligible, min(count, len(eligible)))


def past_tenure(
    candidates: Sequence[tuple[str, float]], now_mono: float, min_tenure_seconds: float
) -> list[str]:
    """The ids among ``(stream id, acquired_mono)`` held at least ``min_tenure_seconds``."""
    return [
        stream_id
        for stream_id, acquired in candidates
        if rules.may_shed(acquired, now_mono, min_tenure_seconds)
    ]


class Rebalancer:
    """Keeps the fleet view current and sheds excess streams."""

    def __init__(self, ctx: WorkerContext, holdings: Holdings, view: FleetView) -> None:
        self._ctx = ctx
        self._holdings = holdings
        self._view = view
        self._rng = random.Random()

    async def rebalance_periodically(self) -> None:
        """Shed every ``rebalance_seconds`` (jittered) until cancelled."""
        settings = self._ctx.settings
        while True:
            await asyncio.sleep(jittered(settings.rebalance_seconds, random.random()))
            try:
                await self.rebalance_once()
            except Exception as exc:  # the next round tries again
                logger.warning("rebalance failed", error=describe(exc))

    async def rebalance_once(self) -> list[str]:
        """One round: by load when the fleet's load is known
        (:func:`placement.choose_by_load`), else by counts (:func:`placement.count_to_shed`);
        returns the stream ids asked to go."""
        ctx = self._ctx
        if ctx.shutdown_requested.is_set():
            return []
        session = ctx.session
        if session is not None and not session.healthy():
            # A handoff's release needs DynamoDB: while the session's renewals lag, a release
            # is likely to go unanswered (the stream then waits to be found, not handed over),
            # and the loads it would judge by are those of a fleet that paused delivering.
            return []
        settings = ctx.settings
        view = self._view
        active: list[StreamHolder] = [h for h in self._holdings if h.is_active]
        now = time.monotonic()
        unpaced = cap = placement.round_cap(self._holdings.capacity, settings.shed_batch)
        budget = placement.fleet_moves_per_second(
            expiry_shards(settings.liveness), ctx.table_write_units
        )
        meter = self._holdings.load
        my_load = meter.total()
        if view.load is not None and my_load is not None:
            mine, surplus = my_load - view.load.mean, view.load.surplus
            cap = placement.paced_cap(cap, mine, surplus, settings.rebalance_seconds, budget)
            loads = meter.loads()
            ids = past_tenure(
                [(h.stream_id, h.acquired_mono) for h in active], now, settings.min_tenure_seconds
            )
            chosen = placement.choose_by_load(
                [(i, loads.get(i, 0.0)) for i in ids], my_load, view.load, cap
            )
        else:
            mine, surplus = len(active) - view.share, view.surplus
            cap = placement.paced_cap(cap, mine, surplus, settings.rebalance_seconds, budget)
            count = placement.count_to_shed(
                len(active),
                view.share,
                placement.giver_slack(settings.rebalance_slack, view.shedding),
                view.deficit,
                view.surplus,
                cap,
            )
            chosen = choose_to_shed(
                [(h.stream_id, h.acquired_mono) for h in active],
                count,
                now,
                settings.min_tenure_seconds,
                self._rng,
            )
        view.shed_idle_rounds = placement.shed_rounds_idle(view.shed_idle_rounds, len(chosen))
        by_id = {h.stream_id: h for h in active}
        spacing = placement.shed_spacing_seconds(
            len(chosen), settings.rebalance_seconds, paced=cap < unpaced
        )
        for n, stream_id in enumerate(chosen):
            if n and spacing:
                await asyncio.sleep(spacing)
            holder = by_id[stream_id]
            if ctx.shutdown_requested.is_set() or not holder.is_active:
                continue
            self._holdings.note_given_away(stream_id)
            holder.request_end(EndReason.SHED)
        if chosen:
            logger.info(
                "shedding streams",
                count=len(chosen),
                held=len(active),
                share=view.share,
                live_workers=view.live_workers,
                load=None if my_load is None else round(my_load, 2),
                mean_load=None if view.load is None else round(view.load.mean, 2),
            )
        return chosen
