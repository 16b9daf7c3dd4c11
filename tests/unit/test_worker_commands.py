"""How the command poller answers one command: acquire, pass on, put back or delete."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from streamlease.schema import Command, CommandType
from worker.acquisition import Outcome
from worker.commands import PASS_ON_LIMIT, CommandPoller
from worker.fleet_view import FleetView
from worker.holdings import Holdings


class FakeQueue:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def delete(self, receipt: str) -> None:
        self.calls.append("delete")

    async def give_back(self, receipt: str, delay_seconds: float = 0.0) -> None:
        self.calls.append("give back")


class FakeAcquirer:
    def __init__(self) -> None:
        self.tried: list[str] = []

    async def try_acquire(self, stream_id: str, *, source: str) -> Outcome:
        self.tried.append(stream_id)
        return Outcome.WON


def poller(held: int, share: int) -> tuple[CommandPoller, FakeQueue, FakeAcquirer]:
    holdings = Holdings(capacity=100, given_away_seconds=15.0)
    for n in range(held):
        holdings.reserve(f"held-{n}")
    queue, acquirer = FakeQueue(), FakeAcquirer()
    ctx = SimpleNamespace(shutdown_requested=asyncio.Event())
    view = FleetView(share=share)
    return (
        CommandPoller(cast(Any, ctx), cast(Any, queue), cast(Any, acquirer), holdings, view),
        queue,
        acquirer,
    )


def message(command: Command, receives: int = 1) -> dict[str, Any]:
    return {
        "ReceiptHandle": "r",
        "Body": command.to_json(),
        "Attributes": {"ApproximateReceiveCount": str(receives)},
    }


REBALANCE = Command(CommandType.HANDOFF, "s1", 2, rebalance=True)


async def test_a_worker_below_its_share_takes_a_rebalance_handoff() -> None:
    handler, queue, acquirer = poller(held=3, share=9)
    await handler._handle(message(REBALANCE))
    assert (acquirer.tried, queue.calls) == (["s1"], ["delete"])


@pytest.mark.parametrize("held", [9, 10])
async def test_a_worker_at_its_share_passes_a_rebalance_handoff_on(held: int) -> None:
    """Taking it would only move the imbalance: it goes back for a worker below its share."""
    handler, queue, acquirer = poller(held=held, share=9)
    await handler._handle(message(REBALANCE))
    assert (acquirer.tried, queue.calls) == ([], ["give back"])


async def test_a_rebalance_handoff_passed_on_too_often_is_taken_by_anyone_with_room() -> None:
    """Bounded: before the dead-letter queue could take it, whoever receives it takes it."""
    handler, queue, acquirer = poller(held=9, share=9)
    await handler._handle(message(REBALANCE, receives=PASS_ON_LIMIT))
    assert (acquirer.tried, queue.calls) == (["s1"], ["delete"])


async def test_an_ordinary_handoff_is_taken_at_the_share() -> None:
    """A draining peer's handoffs need a home at once, share or not."""
    handler, _, acquirer = poller(held=9, share=9)
    await handler._handle(message(Command(CommandType.HANDOFF, "s1", 2)))
    assert acquirer.tried == ["s1"]
