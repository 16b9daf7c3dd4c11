"""Rebalancing: shed streams when this worker holds far above its share.

The fair share comes from the fleet watcher (:mod:`worker.liveness.fleet`, recounted every second).
Every ``rebalance_seconds`` (jittered), when this worker holds more than share + slack, it hands
off a few streams (release + handoff) that it has held for at least ``min_tenure_seconds``. A few
at a time, so the fleet converges without a herd; never more than the workers below their share
lack (a stream shed when nobody below the share can take it only moves the imbalance), and each
handoff is marked for them (:class:`~streamlease.schema.Command` ``rebalance``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

from streamlease import rules
from worker.context import WorkerContext
from worker.logs import describe, logger
from worker.ownership.fleet_view import FleetView
from worker.ownership.holder import EndReason, StreamHolder
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
    eligible = [
        stream_id
        for stream_id, acquired in candidates
        if rules.may_shed(acquired, now_mono, min_tenure_seconds)
    ]
    if count <= 0 or not eligible:
        return []
    return rng.sample(eligible, min(count, len(eligible)))


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
        """One round: shed what :func:`rules.streams_to_shed` says; returns the stream ids
        asked to go."""
        ctx = self._ctx
        if ctx.shutdown_requested.is_set():
            return []
        settings = ctx.settings
        active: list[StreamHolder] = [h for h in self._holdings if h.is_active]
        count = rules.streams_to_shed(
            len(active),
            self._view.share,
            settings.rebalance_slack,
            settings.shed_batch,
            self._view.deficit,
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
