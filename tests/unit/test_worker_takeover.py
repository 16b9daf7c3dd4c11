"""A takeover sweep short of room waits once for a fresher fair share (a large fleet's share
comes from the digest, a few seconds behind a zone's loss) before it frees what it cannot take."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from streamlease.model import LeaseView, WorkerInfo
from streamlease.schema import DesiredState, WorkerState
from streamlease.settings import Settings
from streamlease.telemetry import WorkerMetric
from worker.liveness import takeover as takeover_module
from worker.liveness.takeover import Takeover
from worker.metrics import WorkerMetrics
from worker.ownership.acquisition import Outcome
from worker.ownership.fleet_view import FleetView
from worker.ownership.holdings import Holdings

DEAD = "dead-session"
STREAMS = 6


class Store:
    """The dead session's streams in ``by-holder`` until each is taken or freed."""

    def __init__(self) -> None:
        self.attached = {
            f"s{n}": LeaseView(f"s{n}", DEAD, 4, 0, n, DesiredState.STARTED) for n in range(STREAMS)
        }
        self.freed: list[str] = []

    def owned_by(self, worker_id: str) -> list[LeaseView]:
        return list(self.attached.values()) if worker_id == DEAD else []

    def release_for(self, stream_id: str, *args: Any, **kwargs: Any) -> Any:
        self.attached.pop(stream_id)
        self.freed.append(stream_id)
        return SimpleNamespace(desired_state=DesiredState.STOPPED, generation=1)


class Acquirer:
    def __init__(self, holdings: Holdings, store: Store) -> None:
        self.holdings = holdings
        self.store = store

    async def try_acquire(self, stream_id: str, *, source: str, dead: Any) -> Outcome:
        self.store.attached.pop(stream_id)
        self.holdings.reserve(stream_id)
        return Outcome.WON


def sweep(share: int) -> tuple[Takeover, Store, Holdings, FleetView]:
    holdings = Holdings(capacity=100, given_away_seconds=15.0)
    store = Store()
    ctx = SimpleNamespace(
        settings=Settings(),
        store=store,
        sessions=SimpleNamespace(delete=lambda _id: None),
        handoffs=None,
        metrics=WorkerMetrics(),
    )
    view = FleetView(share=share, live_workers=3)
    taker = Takeover(cast(Any, ctx), cast(Any, Acquirer(holdings, store)), holdings, view)
    return taker, store, holdings, view


def tombstone() -> WorkerInfo:
    return WorkerInfo(DEAD, WorkerState.EXPIRED, 0, 0, STREAMS, 100, "h", 1)


async def test_a_sweep_short_of_room_waits_for_a_fresher_share_and_then_takes_everything(
    monkeypatch: Any,
) -> None:
    """The digest's share did not yet count the dead session: after the wait it does, and the
    streams are taken at once instead of freed (and handed off) to others."""
    monkeypatch.setattr(takeover_module, "REREAD_SECONDS", 0.0)
    taker, store, holdings, view = sweep(share=2)
    waits: list[int] = []

    async def settle() -> None:
        waits.append(1)
        view.share = STREAMS

    taker.settle = settle
    await asyncio.wait_for(taker.take_over(tombstone()), 5)
    assert waits == [1]
    assert holdings.count == STREAMS
    assert store.freed == []


async def test_a_sweep_with_room_does_not_wait(monkeypatch: Any) -> None:
    monkeypatch.setattr(takeover_module, "REREAD_SECONDS", 0.0)
    taker, _, holdings, _ = sweep(share=STREAMS)
    waits: list[int] = []

    async def settle() -> None:
        waits.append(1)

    taker.settle = settle
    await asyncio.wait_for(taker.take_over(tombstone()), 5)
    assert waits == []
    assert holdings.count == STREAMS


async def test_a_small_fleet_frees_at_once_what_it_has_no_room_for(monkeypatch: Any) -> None:
    """No settle hook (a fleet read whole each round has a current share): two are taken, the
    rest freed — each freed one a takeover, as its stream item counts it — and a share that
    stays short after the wait frees the rest too."""
    monkeypatch.setattr(takeover_module, "REREAD_SECONDS", 0.0)
    taker, store, holdings, _ = sweep(share=2)
    await asyncio.wait_for(taker.take_over(tombstone()), 5)
    assert holdings.count == 2
    assert len(store.freed) == STREAMS - 2
    assert taker._ctx.metrics.total(WorkerMetric.TAKEOVERS) == STREAMS - 2

    taker, store, holdings, _ = sweep(share=2)
    waits: list[int] = []

    async def settle() -> None:
        waits.append(1)

    taker.settle = settle
    await asyncio.wait_for(taker.take_over(tombstone()), 5)
    assert waits == [1]
    assert holdings.count == 2
    assert len(store.freed) == STREAMS - 2
