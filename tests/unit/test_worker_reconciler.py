"""Which orphans a reconcile round takes: released streams are left to their handoff by workers
not below their share, for one round."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any, cast

from streamlease.model import LeaseView
from streamlease.settings import Settings
from worker.acquisition import Outcome
from worker.fleet_view import FleetView
from worker.holdings import Holdings
from worker.reconciler import Reconciler

RELEASED = LeaseView("released", None, 3, expires_at_ms=0)
"""Freed by its holder (a rebalance or a drain): its handoff command is on the way."""
EXPIRED = LeaseView("expired", "dead-worker", 2, expires_at_ms=5)
"""Its holder stopped renewing long ago: nobody will hand it over."""


class Store:
    def __init__(self, views: list[LeaseView]) -> None:
        self.views = views

    def expiring_before(self, bound_ms: int, *, limit: int) -> list[LeaseView]:
        return list(self.views)


class Acquirer:
    def __init__(self, holdings: Holdings) -> None:
        self.holdings = holdings
        self.tried: list[str] = []

    def may_acquire(self) -> bool:
        return True

    async def try_acquire(self, stream_id: str, *, source: str) -> Outcome:
        self.tried.append(stream_id)
        self.holdings.reserve(stream_id)
        return Outcome.WON


def reconciler(
    held: int, share: int, views: list[LeaseView], **settings: Any
) -> tuple[Reconciler, Acquirer, Store]:
    holdings = Holdings(capacity=100, given_away_seconds=15.0)
    for n in range(held):
        holdings.reserve(f"held-{n}")
    store = Store(views)
    acquirer = Acquirer(holdings)
    ctx = SimpleNamespace(
        settings=dataclasses.replace(Settings(), **settings),
        shutdown_requested=asyncio.Event(),
        store=store,
        worker_id="me",
    )
    view = FleetView(share=share, live_workers=3)
    return Reconciler(cast(Any, ctx), cast(Any, acquirer), holdings, view), acquirer, store


async def test_a_worker_at_its_share_leaves_a_just_released_stream_to_its_handoff() -> None:
    """Taking it would be a wasted move; a stream whose holder died has no handoff coming."""
    rounds, acquirer, _ = reconciler(held=5, share=5, views=[RELEASED, EXPIRED])
    await rounds.reconcile_once()
    assert acquirer.tried == ["expired"]


async def test_a_released_stream_still_unowned_a_round_later_is_taken() -> None:
    """The share may be stale, or the handoff lost: nobody leaves it unowned for good."""
    rounds, acquirer, _ = reconciler(held=5, share=5, views=[RELEASED])
    await rounds.reconcile_once()
    assert acquirer.tried == []
    await rounds.reconcile_once()
    assert acquirer.tried == ["released"]


async def test_a_worker_below_its_share_takes_a_released_stream_at_once() -> None:
    rounds, acquirer, _ = reconciler(held=2, share=5, views=[RELEASED])
    await rounds.reconcile_once()
    assert acquirer.tried == ["released"]


async def test_without_handoffs_a_released_stream_is_taken_at_once() -> None:
    """Releases that send no handoff (the seed design) have nothing to wait for."""
    rounds, acquirer, _ = reconciler(held=5, share=5, views=[RELEASED], handoff_on_release=False)
    await rounds.reconcile_once()
    assert acquirer.tried == ["released"]
