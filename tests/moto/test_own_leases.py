"""A session's poll of its own streams against the moto server: stops reach their holders,
a stream owned but held by nobody is released after two polls, and a worker holding many
streams gets only the stopped ones back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from stream_items import Handoffs, put_stream

from streamlease.lease_store import LeaseStore
from streamlease.model import LeaseView, Stream
from streamlease.schema import PK, DesiredState, StreamAttr, stream_key
from worker.fencing.slots import SlotTable
from worker.ownership.end_reason import EndReason
from worker.ownership.own_leases import OwnLeases

OWNER = "task1/1-ab"
LEASE_MS = 20_000


@dataclass
class FakeHolder:
    stream_id: str
    epoch: int
    owner: str = OWNER
    generation: int = 1
    ended: list[EndReason] = field(default_factory=list)
    changes: list[Stream] = field(default_factory=list)

    @property
    def is_active(self) -> bool:
        return not self.ended

    def request_end(self, reason: EndReason) -> None:
        self.ended.append(reason)

    def change(self, stream: Stream) -> bool:
        self.changes.append(stream)
        return True


class FakeHoldings:
    def __init__(self) -> None:
        self.by_id: dict[str, FakeHolder] = {}

    def __contains__(self, stream_id: object) -> bool:
        return stream_id in self.by_id

    def __iter__(self) -> Iterator[FakeHolder]:
        return iter(list(self.by_id.values()))

    def holder(self, stream_id: str) -> FakeHolder | None:
        return self.by_id.get(stream_id)


@pytest.fixture
def seed(dynamodb: Any, aws_settings: Any) -> Any:
    def write(stream_id: str, **fields: Any) -> None:
        put_stream(dynamodb, aws_settings.table_name, stream_id, **fields)

    return write


def stop(dynamodb: Any, table: str, stream_id: str) -> None:
    dynamodb.update_item(
        TableName=table,
        Key={PK: {"S": stream_key(stream_id)}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": StreamAttr.DESIRED_STATE},
        ExpressionAttributeValues={":s": {"S": DesiredState.STOPPED.value}},
    )


CAPACITY = 2


def poller(
    store: LeaseStore,
    holdings: FakeHoldings,
    handoffs: Handoffs,
    rollovers: list[str] | None = None,
) -> OwnLeases:
    ctx = SimpleNamespace(
        session=SimpleNamespace(
            worker_id=OWNER, live=True, retiring=False, slots=SlotTable(2 * CAPACITY)
        ),
        store=store,
        settings=SimpleNamespace(handoff_on_release=True, capacity=CAPACITY),
        handoffs=handoffs,
    )
    calls = [] if rollovers is None else rollovers
    return OwnLeases(cast(Any, ctx), cast(Any, holdings), lambda: calls.append("rollover"))


def slots_of(own: OwnLeases) -> SlotTable:
    slots: SlotTable = cast(Any, own)._ctx.session.slots
    return slots


def test_stopped_of_returns_only_the_stopped_and_counts_all(
    store: LeaseStore, seed: Any, dynamodb: Any, aws_settings: Any
) -> None:
    for n in range(30):
        seed(f"s{n}")
        store.acquire(f"s{n}", OWNER, LEASE_MS, slot=n)
    seed("other")
    store.acquire("other", "task2/1-cd", LEASE_MS, slot=0)
    for n in (3, 17):
        stop(dynamodb, aws_settings.table_name, f"s{n}")

    owned = store.stopped_of(OWNER)

    assert owned.count == 30
    assert sorted(v.stream_id for v in owned.stopped) == ["s17", "s3"]
    assert {v.desired_state for v in owned.stopped} == {DesiredState.STOPPED}


async def test_a_stop_reaches_the_holder_of_that_epoch_only(
    store: LeaseStore, seed: Any, dynamodb: Any, aws_settings: Any
) -> None:
    holdings, handoffs = FakeHoldings(), Handoffs()
    for stream_id in ("a", "b"):
        seed(stream_id)
        lease = store.acquire(stream_id, OWNER, LEASE_MS, slot=len(holdings.by_id))
        holdings.by_id[stream_id] = FakeHolder(stream_id, lease.epoch)
    holdings.by_id["b"].epoch += 1  # a holder of another epoch is not this lease's
    for stream_id in ("a", "b"):
        stop(dynamodb, aws_settings.table_name, stream_id)

    assert await poller(store, holdings, handoffs).poll_once() == ["a"]
    assert holdings.by_id["a"].ended == [EndReason.STOPPED]
    assert holdings.by_id["b"].ended == []


async def test_a_stream_owned_but_not_held_is_released_after_two_polls(
    store: LeaseStore, seed: Any
) -> None:
    """The store says this session owns "lost" (an acquire whose answer never came back), no
    holder holds it: the first poll notes it (the index may lag), the second releases it and
    hands it off. Held streams are left alone."""
    holdings, handoffs = FakeHoldings(), Handoffs()
    seed("held")
    lease = store.acquire("held", OWNER, LEASE_MS, slot=0)
    holdings.by_id["held"] = FakeHolder("held", lease.epoch)
    seed("lost")
    store.acquire("lost", OWNER, LEASE_MS, slot=1)
    own = poller(store, holdings, handoffs)

    await own.poll_once()
    assert store.read("lost").owner == OWNER
    await own.poll_once()

    assert store.read("lost").owner is None
    assert handoffs.sent == ["lost"]
    assert store.read("held").owner == OWNER


async def test_a_lost_slot_is_recovered_once_its_stream_item_no_longer_names_it(
    store: LeaseStore, seed: Any
) -> None:
    """Slot 1's acquire got no answer and its write landed after all ("late" names slot 1):
    the slot stays lost while the item names it, and is recovered on the poll after the stray
    release. Slot 2's write never landed ("never"): recovered on the first poll it is due."""
    holdings, handoffs = FakeHoldings(), Handoffs()
    seed("late")
    store.acquire("late", OWNER, LEASE_MS, slot=1)
    seed("never")
    own = poller(store, holdings, handoffs)
    slots = slots_of(own)
    assert [slots.reserve(0.0), slots.reserve(0.0), slots.reserve(0.0)] == [0, 1, 2]
    slots.lose(1, "late", check_after_mono=0.0)
    slots.lose(2, "never", check_after_mono=0.0)

    await own.poll_once()  # "late" seen as a stray once; "never" settled
    assert (slots.lost, [s for s, _ in slots.lost_due(1e12)]) == (1, [1])
    await own.poll_once()  # "late" released as a stray, then settled
    assert store.read("late").owner is None
    assert slots.lost == 0
    assert slots.usable_capacity(CAPACITY) == CAPACITY


async def test_a_lost_slot_is_not_read_before_it_is_due(store: LeaseStore, seed: Any) -> None:
    """An acquire's write may land for a while after its answer was lost: until then the
    slot is not even read."""
    own = poller(store, FakeHoldings(), Handoffs())
    slots = slots_of(own)
    slots.reserve(0.0)
    slots.lose(0, "s", check_after_mono=float("inf"))
    await own.poll_once()
    assert slots.lost == 1


async def test_a_session_left_with_less_than_half_its_capacity_asks_to_roll_over(
    store: LeaseStore, seed: Any
) -> None:
    """Every stream item still names its lost slot (the store keeps failing to settle them):
    past half the capacity the worker asks for a fresh session, once."""
    rollovers: list[str] = []
    holdings = FakeHoldings()
    own = poller(store, holdings, Handoffs(), rollovers)
    slots = slots_of(own)
    for slot in range(2 * CAPACITY):
        stream_id = f"s{slot}"
        seed(stream_id)
        lease = store.acquire(stream_id, OWNER, LEASE_MS, slot=slot)
        holdings.by_id[stream_id] = FakeHolder(stream_id, lease.epoch)  # not a stray
        slots.reserve(0.0)
        slots.lose(slot, stream_id, check_after_mono=0.0)
        await own.poll_once()
        assert rollovers == ([] if slot < 3 else ["rollover"])
        cast(Any, own)._ctx.session.retiring = bool(rollovers)


def change(dynamodb: Any, table: str, stream_id: str, url: str) -> None:
    """What PATCH /streams/{id} writes: a new URL, generation + 1, the lease untouched."""
    dynamodb.update_item(
        TableName=table,
        Key={PK: {"S": stream_key(stream_id)}},
        UpdateExpression="SET #u = :u, #g = #g + :one",
        ExpressionAttributeNames={"#u": StreamAttr.WS_URL, "#g": StreamAttr.GENERATION},
        ExpressionAttributeValues={":u": {"S": url}, ":one": {"N": "1"}},
    )


def test_a_stream_changed_in_place_comes_back_with_the_stopped_ones(
    store: LeaseStore, seed: Any, dynamodb: Any, aws_settings: Any
) -> None:
    """Above the lowest generation held: the changed stream; the others stay unparsed."""
    for n in range(5):
        seed(f"s{n}")
        store.acquire(f"s{n}", OWNER, LEASE_MS, slot=n)
    change(dynamodb, aws_settings.table_name, "s2", "wss://feed-2.example.com/x")
    stop(dynamodb, aws_settings.table_name, "s4")

    owned = store.stopped_of(OWNER, above_generation=1)

    assert (owned.count, [v.stream_id for v in owned.stopped]) == (5, ["s4"])
    assert [(v.stream_id, v.generation) for v in owned.changed] == [("s2", 2)]
    assert store.stopped_of(OWNER).changed == ()


def test_the_own_streams_read_parses_only_what_a_holder_compares(
    store: LeaseStore, seed: Any, dynamodb: Any, aws_settings: Any
) -> None:
    """A stream held above the lowest generation (restarted once) comes back every poll: its
    view carries the stream, epoch, desired state and generation, nothing else of the entry."""
    for n in range(3):
        seed(f"s{n}")
        store.acquire(f"s{n}", OWNER, LEASE_MS, slot=n)
    change(dynamodb, aws_settings.table_name, "s1", "wss://feed-1.example.com/x")
    stop(dynamodb, aws_settings.table_name, "s2")

    owned = store.stopped_of(OWNER, above_generation=1)

    epochs = {s: store.read(s).epoch for s in ("s1", "s2")}
    assert owned.changed == (
        LeaseView("s1", None, epochs["s1"], 0, desired_state=DesiredState.STARTED, generation=2),
    )
    assert owned.stopped == (
        LeaseView("s2", None, epochs["s2"], 0, desired_state=DesiredState.STOPPED, generation=1),
    )


async def test_a_change_reaches_the_holder_of_that_epoch_with_the_new_settings(
    store: LeaseStore, seed: Any, dynamodb: Any, aws_settings: Any
) -> None:
    """The holder gets the stream as read after the change; a holder of another epoch, or one
    already at that generation, gets nothing."""
    holdings, handoffs = FakeHoldings(), Handoffs()
    for n, stream_id in enumerate(("a", "b", "c")):
        seed(stream_id)
        lease = store.acquire(stream_id, OWNER, LEASE_MS, slot=n)
        holdings.by_id[stream_id] = FakeHolder(stream_id, lease.epoch)
    holdings.by_id["b"].epoch += 1
    holdings.by_id["c"].generation = 2
    for stream_id in ("a", "b", "c"):
        change(dynamodb, aws_settings.table_name, stream_id, "wss://feed-2.example.com/x")

    assert await poller(store, holdings, handoffs).poll_once() == []

    (seen,) = holdings.by_id["a"].changes
    assert (seen.ws_url, seen.generation, seen.owner) == ("wss://feed-2.example.com/x", 2, OWNER)
    assert holdings.by_id["b"].changes == holdings.by_id["c"].changes == []
    assert all(not h.ended for h in holdings)
