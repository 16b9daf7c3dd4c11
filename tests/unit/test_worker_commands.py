"""How the command poller answers one command: acquire, pass on, put back or delete."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from streamlease import placement
from streamlease.commands import Command, CommandType
from streamlease.telemetry import TRACE_MESSAGE_ATTRIBUTE
from worker.ownership import commands
from worker.ownership.acquisition import Outcome
from worker.ownership.commands import PASS_ON_LIMIT, CommandPoller
from worker.ownership.fleet_view import FleetView
from worker.ownership.holdings import Holdings


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
        self.trace_headers: list[str | None] = []

    async def try_acquire(
        self, stream_id: str, *, source: str, trace_header: str | None = None
    ) -> Outcome:
        self.tried.append(stream_id)
        self.trace_headers.append(trace_header)
        return Outcome.WON

    def may_acquire(self) -> bool:
        return True


def poller(
    held: int, share: int, queue: FakeQueue | None = None
) -> tuple[CommandPoller, FakeQueue, FakeAcquirer]:
    holdings = Holdings(capacity=100, given_away_seconds=15.0)
    for n in range(held):
        holdings.reserve(f"held-{n}")
    queue, acquirer = queue or FakeQueue(), FakeAcquirer()
    ctx = SimpleNamespace(
        shutdown_requested=asyncio.Event(), settings=SimpleNamespace(rebalance_seconds=5.0)
    )
    view = FleetView()
    view.recount(share, 1)
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
START = Command(CommandType.START, "s2", 1)


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


async def test_the_commands_trace_header_goes_to_the_acquire() -> None:
    """The acquire span joins the trace of whoever sent the command (its AWSTraceHeader)."""
    handler, _, acquirer = poller(held=0, share=9)
    traced = message(START)
    traced["Attributes"][TRACE_MESSAGE_ATTRIBUTE] = "Root=1-5759e988-bd862e3fe1be46a994272793"
    await handler._handle(traced)
    await handler._handle(message(START))
    assert acquirer.trace_headers == ["Root=1-5759e988-bd862e3fe1be46a994272793", None]


class OnceQueue(FakeQueue):
    """Delivers one message on the first receive, nothing afterwards; records when asked."""

    def __init__(self, first: dict[str, Any]) -> None:
        super().__init__()
        self._first: list[dict[str, Any]] = [first]
        self.receives: list[float] = []

    async def receive(self, count: int) -> list[dict[str, Any]]:
        self.receives.append(time.monotonic())
        await asyncio.sleep(0.01)  # a short poll
        first, self._first = self._first, []
        return first


@pytest.mark.parametrize(("command", "pauses"), [(REBALANCE, True), (START, False)])
async def test_a_worker_that_passed_a_rebalance_handoff_on_stays_out_of_the_queue_a_while(
    monkeypatch: pytest.MonkeyPatch, command: Command, pauses: bool
) -> None:
    """Otherwise it asks again at once and, SQS answering whoever asks first, receives the same
    handoff again and again until the pass-on limit has it take it: a wasted move."""
    monkeypatch.setattr(commands, "PASS_ON_PAUSE_SECONDS", 0.3)
    queue = OnceQueue(message(command))
    handler, _, _ = poller(held=9, share=9, queue=queue)
    task = asyncio.create_task(handler.poll_commands())
    await asyncio.sleep(0.2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert (len(queue.receives) == 1) is pauses


REBALANCE_SECONDS = 600.0
"""Long enough that the test never sees the hold-off lapse on its own."""


class WatchedQueue(OnceQueue):
    """Records whether the worker should have held off when each receive was asked for."""

    def __init__(self, first: dict[str, Any], view: FleetView) -> None:
        super().__init__(first)
        self.view = view
        self.held_off: list[bool] = []
        self.received = asyncio.Event()

    async def receive(self, count: int) -> list[dict[str, Any]]:
        self.held_off.append(self.view.holds_off(time.monotonic(), REBALANCE_SECONDS))
        self.received.set()
        return await super().receive(count)


async def test_a_worker_at_its_share_stays_out_of_the_queue_while_the_fleet_rebalances() -> None:
    """At the end of a scale-out a few workers below their share poll among many at it: SQS
    gives a handoff to whoever asks first, so the workers at their share leave the queue to
    them while givers shed into what they lack (then they poll again, for new streams)."""
    holdings = Holdings(capacity=100, given_away_seconds=15.0)
    for n in range(9):
        holdings.reserve(f"held-{n}")
    view = FleetView()
    view.recount(90, 10)  # share 9, and 9 to take up to
    view.note_balance(4, 4, time.monotonic())  # a peer lacks 4, another holds 4 above it
    queue = WatchedQueue(message(START), view)
    ctx = SimpleNamespace(
        shutdown_requested=asyncio.Event(),
        settings=SimpleNamespace(rebalance_seconds=REBALANCE_SECONDS),
    )
    handler = CommandPoller(
        cast(Any, ctx), cast(Any, queue), cast(Any, FakeAcquirer()), holdings, view
    )
    task = asyncio.create_task(handler.poll_commands())
    await asyncio.sleep(5 * commands.IDLE_CHECK_SECONDS)  # a few looks at the gate
    view.note_balance(0, 0, time.monotonic())  # the takers have theirs
    await asyncio.wait_for(queue.received.wait(), 30)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert queue.held_off and not any(queue.held_off)


class StallingAcquirer(FakeAcquirer):
    """An acquire whose answer never comes (a worker's stop cancels it), or that comes back
    unanswered."""

    def __init__(self, outcome: Outcome | None) -> None:
        super().__init__()
        self._outcome = outcome

    async def try_acquire(
        self, stream_id: str, *, source: str, trace_header: str | None = None
    ) -> Outcome:
        self.tried.append(stream_id)
        if self._outcome is None:
            await asyncio.Event().wait()
        return cast(Outcome, self._outcome)


async def test_a_command_whose_acquire_a_stop_cancelled_goes_straight_back() -> None:
    """The next owner does not wait out the visibility timeout for a stopping worker."""
    handler, queue, _ = poller(held=0, share=9)
    handler._acquirer = cast(Any, StallingAcquirer(None))
    task = asyncio.create_task(handler._handle(message(START)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.calls == ["give back"]


@pytest.mark.parametrize(("stopping", "calls"), [(True, ["give back"]), (False, [])])
async def test_an_unanswered_acquire_goes_straight_back_only_from_a_stopping_worker(
    stopping: bool, calls: list[str]
) -> None:
    """A running worker leaves it to the visibility timeout (its acquire may still land and
    settle it); a stopping one will not try again."""
    handler, queue, _ = poller(held=0, share=9)
    handler._acquirer = cast(Any, StallingAcquirer(Outcome.UNANSWERED))
    if stopping:
        handler._ctx.shutdown_requested.set()
    await handler._handle(message(START))
    assert queue.calls == calls


class TimedAcquirer(FakeAcquirer):
    """Records when each acquire started (monotonic seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[float] = []

    async def try_acquire(
        self, stream_id: str, *, source: str, trace_header: str | None = None
    ) -> Outcome:
        self.started.append(time.monotonic())
        return await super().try_acquire(stream_id, source=source, trace_header=trace_header)


async def test_rebalance_handoffs_received_together_are_taken_at_the_taker_s_pace() -> None:
    """A batch of rebalance handoffs is taken one 1 / TAKES_PER_SECOND after another (its
    acquires and connection states all land on the taker's own by-holder partition)."""
    handler, queue, _ = poller(held=0, share=50)
    acquirer = TimedAcquirer()
    handler._acquirer = cast(Any, acquirer)
    handoffs = [Command(CommandType.HANDOFF, f"s{n}", 1, rebalance=True) for n in range(5)]
    before = time.monotonic()
    async with asyncio.TaskGroup() as tasks:
        for command in handoffs:
            tasks.create_task(handler._handle(message(command)))
    assert len(acquirer.tried) == 5 and queue.calls == ["delete"] * 5
    gap = 1.0 / placement.TAKES_PER_SECOND
    for n, started in enumerate(sorted(acquirer.started)):
        assert started >= before + n * gap - 0.002, n  # its turn; a busy machine only delays


async def test_a_rebalance_handoff_whose_take_a_stop_cancelled_goes_straight_back() -> None:
    """Cancelled while it waits its turn, a handoff is given back at once, as one cancelled
    mid-acquire is, and never taken."""
    handler, queue, acquirer = poller(held=0, share=50)
    handler._next_take = time.monotonic() + 60.0  # its turn is far off
    task = asyncio.create_task(handler._handle(message(REBALANCE)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (acquirer.tried, queue.calls) == ([], ["give back"])
