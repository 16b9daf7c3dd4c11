"""What the acquirer lets a session take when checkpoint slots are lost (architecture §4a)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from streamlease.schema import Liveness
from streamlease.settings import Settings
from worker.fencing.slots import SlotTable
from worker.ownership.acquisition import Acquirer
from worker.ownership.holdings import Holdings

CAPACITY = 4


def acquirer(held: int) -> tuple[Acquirer, Holdings, Any]:
    holdings = Holdings(capacity=CAPACITY, given_away_seconds=15.0)
    for n in range(held):
        holdings.reserve(f"held-{n}")
    session = SimpleNamespace(
        live=True, retiring=False, slots=SlotTable(2 * CAPACITY), healthy=lambda: True
    )
    ctx = SimpleNamespace(
        settings=Settings(liveness=Liveness.SESSION, capacity=CAPACITY),
        shutdown_requested=asyncio.Event(),
        loop_lagging=False,
        session=session,
    )
    return Acquirer(cast(Any, ctx), holdings, cast(Any, None)), holdings, session


def lose(session: Any, count: int) -> None:
    for n in range(count):
        slot = session.slots.reserve(0.0)
        session.slots.lose(slot, f"s{n}", 0.0)


def test_lost_slots_within_the_spare_half_cost_no_capacity() -> None:
    taker, holdings, session = acquirer(held=3)
    lose(session, CAPACITY)
    assert taker.may_acquire()
    assert holdings.capacity == CAPACITY


def test_beyond_the_spare_half_the_worker_holds_fewer_and_says_why() -> None:
    """Five of eight slots lost: room for three streams. Holding three, it takes no more (and
    logs that checkpoint slots are lost); holding two, it still takes one."""
    taker, holdings, session = acquirer(held=3)
    lose(session, CAPACITY + 1)
    assert not taker.may_acquire()
    assert (holdings.capacity, holdings.free) == (CAPACITY - 1, 0)
    assert taker._unhealthy_reason == "checkpoint slots lost"
    holdings.cancel_reservation("held-0")
    assert taker.may_acquire()


def test_recovered_slots_give_the_capacity_back() -> None:
    taker, holdings, session = acquirer(held=3)
    lose(session, CAPACITY + 1)
    assert not taker.may_acquire()
    for slot, _ in session.slots.lost_due(1.0):
        session.slots.recover(slot, 1.0)
    assert taker.may_acquire()
    assert holdings.capacity == CAPACITY


def test_a_session_rolling_over_takes_nothing() -> None:
    taker, _, session = acquirer(held=0)
    session.retiring = True
    assert not taker.may_acquire()
    assert taker._unhealthy_reason == "session rolling over"
