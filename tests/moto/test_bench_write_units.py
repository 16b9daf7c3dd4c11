"""The bench's write-unit model, checked on the requests the real lease and session stores send.

A per-stream renewal must cost the table write plus the ``by-shard-expiry`` delete and insert
(its sort key moves); a session renewal moves no index key (one rewrite of its fleet-index
entry); ownership changes add ``by-owner`` entries; a session's stream leaves the orphan index
when acquired and a takeover of a dead session's stream does not touch it; a failed condition
costs the table unit only; a large checkpoint vector costs a unit per started KB.
"""

from __future__ import annotations

from typing import Any

import pytest
from stream_items import put_stream

from bench.request_counter import RequestCounter, write_requests
from bench.write_units import changed_attributes, item_size_bytes, table_units
from streamlease import checkpoints
from streamlease.errors import LeaseConflict
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY, BY_STATE, FLEET
from streamlease.lease_store import LeaseStore
from streamlease.model import WorkerInfo
from streamlease.schema import PK, ConnectionState, WorkerState, worker_key
from streamlease.session_store import SessionStore

NOW = 1_800_000_000_000
LEASE_MS = 20_000


@pytest.fixture
def table(aws_settings: Any) -> str:
    return str(aws_settings.table_name)


@pytest.fixture
def counted(store: LeaseStore, dynamodb: Any) -> RequestCounter:
    counter = RequestCounter()
    counter.attach(dynamodb)
    return counter


def vector_of(streams: int) -> bytes:
    """The checkpoint vector of ``streams`` streams at realistic epochs and seqs."""
    return checkpoints.encode(
        [
            checkpoints.Checkpoint(3, 1_000_000 + n, checkpoints.stream_tag(f"s{n}"))
            for n in range(streams)
        ]
    )


def units_of(counter: RequestCounter, action: Any) -> dict[str, int]:
    before = dict(counter.write_units)
    action()
    return {k: v - before.get(k, 0) for k, v in counter.write_units.items() if v - before.get(k, 0)}


def test_update_expressions_name_the_attributes_they_change() -> None:
    """SET (commas inside functions included), REMOVE and #placeholders are all understood."""
    set_attrs, removed = changed_attributes(
        "SET a = :a, #b = if_not_exists(#b, :zero) + :one REMOVE c, d",
        {"#b": "bee"},
    )
    assert (set_attrs, removed) == ({"a", "bee"}, {"c", "d"})


def test_a_renewal_costs_the_table_write_plus_an_index_delete_and_insert(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """Every heartbeat moves lease_expires_at_ms, the sort key of by-shard-expiry: 1 + 2."""
    put_stream(dynamodb, table, "s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    renewal = units_of(
        counted, lambda: store.renew("s1", "w1", lease.epoch, 5, LEASE_MS, now_ms=NOW + 5000)
    )
    assert renewal == {"table": 1, BY_SHARD_EXPIRY.name: 2}


def test_the_counter_tells_a_renewal_from_other_writes_to_the_stream(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """A renewal sets the lease's expiry; a connection-state write does not (and moves no
    index entry): the write-cost bench counts renewals by that, not by writes to the item."""
    put_stream(dynamodb, table, "s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)  # sets it too
    store.record_connection("s1", "w1", lease.epoch, ConnectionState.CONNECTED, now_ms=NOW + 10)
    assert counted.expiry_writes_by_request == {"UpdateItem stream": 1}
    store.renew("s1", "w1", lease.epoch, 5, LEASE_MS, now_ms=NOW + 5000)
    assert counted.expiry_writes_by_request == {"UpdateItem stream": 2}
    assert counted.by_target["UpdateItem stream"] == 3


def test_lease_writes_never_touch_the_listing_index(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """by-state is keyed on desired_state and stream_id: acquire, renew, release cost it 0."""
    put_stream(dynamodb, table, "s1")

    def hold() -> None:
        lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
        for beat in range(1, 4):
            store.renew("s1", "w1", lease.epoch, beat, LEASE_MS, now_ms=NOW + 5000 * beat)
        store.release("s1", "w1", lease.epoch, last_seq=3, now_ms=NOW + 20_000)

    assert BY_STATE.name not in units_of(counted, hold)


def test_acquire_and_release_also_add_and_remove_the_owner_index_entry(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """A fresh acquire inserts into by-owner, a release deletes from it."""
    put_stream(dynamodb, table, "s1")
    acquire = units_of(counted, lambda: store.acquire("s1", "w1", LEASE_MS, now_ms=NOW))
    assert acquire == {"table": 1, BY_SHARD_EXPIRY.name: 2, BY_OWNER.name: 1}
    release = units_of(counted, lambda: store.release("s1", "w1", 1, last_seq=3, now_ms=NOW))
    assert release == {"table": 1, BY_SHARD_EXPIRY.name: 2, BY_OWNER.name: 1}


def test_a_takeover_moves_the_owner_index_entry(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """Taking an expired lease from another owner changes by-owner's key: delete + insert."""
    put_stream(dynamodb, table, "s1", owner="w0", expires_ms=NOW - 60_000, epoch=4)
    takeover = units_of(counted, lambda: store.acquire("s1", "w1", LEASE_MS, now_ms=NOW))
    assert takeover[BY_OWNER.name] == 2
    assert takeover[BY_SHARD_EXPIRY.name] == 2


def test_a_session_acquire_only_removes_the_orphan_index_entry(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """Attached to a session the stream leaves by-shard-expiry (1), enters by-owner (1)."""
    put_stream(dynamodb, table, "s1")
    acquire = units_of(counted, lambda: store.acquire("s1", "w1", LEASE_MS, now_ms=NOW, slot=0))
    assert acquire == {"table": 1, BY_SHARD_EXPIRY.name: 1, BY_OWNER.name: 1}


def test_taking_over_a_dead_sessions_stream_writes_no_orphan_index_entry(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """Owner to owner: the table and by-holder's delete + insert, nothing on the orphan index;
    the new holder's connection state rewrites its by-holder entry (spread over owners)."""
    put_stream(dynamodb, table, "s1")
    lease = store.acquire("s1", "dead", LEASE_MS, now_ms=NOW, slot=0)
    taken = units_of(counted, lambda: store.take_from("s1", "dead", lease.epoch, 7, "w1", 3))
    assert taken == {"table": 1, BY_OWNER.name: 2}
    connected = units_of(
        counted,
        lambda: store.record_connection("s1", "w1", lease.epoch + 1, ConnectionState.CONNECTED),
    )
    assert connected == {"table": 1, BY_OWNER.name: 1}


def test_a_failed_condition_costs_the_table_unit_and_no_index_write(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """Losing an acquire race is billed too, but touches no index."""
    put_stream(dynamodb, table, "s1", owner="w0", expires_ms=NOW + 60_000, epoch=1)

    def lose() -> None:
        with pytest.raises(LeaseConflict):
            store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    assert units_of(counted, lose) == {"table": 1}
    assert counted.requests["UpdateItem failed"] == 1


def test_session_renewals_move_no_index_key(
    dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """The create inserts the fleet entry; a renewal rewrites its projected fields only (1 fleet
    unit, never a key move). The table's units follow the item's size: at 100 streams the
    vector is 601 bytes, and with the classifier's 400-byte allowance for the rest of the item
    that is 2 units (the item DynamoDB measures is smaller: see the last test)."""
    sessions = SessionStore(dynamodb, table)
    info = WorkerInfo("w1", WorkerState.RUNNING, NOW, NOW + LEASE_MS, 0, 100, "host", 1)
    assert units_of(counted, lambda: sessions.create(info)) == {"table": 1, FLEET.name: 1}
    vector = vector_of(100)

    def renew() -> None:
        sessions.renew(
            "w1", expires_at_ms=NOW + 30_000, now_ms=NOW, active_streams=100, checkpoints=vector
        )

    assert len(vector) == 601
    assert units_of(counted, renew) == {"table": 2, FLEET.name: 1}
    assert write_requests(counted.snapshot()) == 2


def test_a_large_checkpoint_vector_costs_a_unit_per_kilobyte(
    dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """Item size is what DynamoDB bills: 1,000 streams' checkpoints take several units."""
    sessions = SessionStore(dynamodb, table)
    sessions.create(WorkerInfo("w1", WorkerState.RUNNING, NOW, NOW + LEASE_MS, 0, 1000, "h", 1))
    vector = vector_of(1000)

    def renew() -> None:
        sessions.renew(
            "w1", expires_at_ms=NOW + 30_000, now_ms=NOW, active_streams=1000, checkpoints=vector
        )

    units = units_of(counted, renew)
    assert len(vector) > 3000
    assert units["table"] >= 4
    assert units[FLEET.name] == 1


def test_reads_are_counted_in_read_units(
    store: LeaseStore, dynamodb: Any, table: str, counted: RequestCounter
) -> None:
    """A consistent GetItem of a small item is one read unit."""
    put_stream(dynamodb, table, "s1")
    store.read("s1", consistent=True)
    assert counted.read_units == 1.0
    assert counted.attempts["GetItem"] == 1


def test_item_size_follows_dynamodbs_rule() -> None:
    """Names plus values: a string's UTF-8 bytes, binary's length, a number's digit pairs + 1."""
    item = {"s": {"S": "abcé"}, "bin": {"B": b"\x00\x01\x02"}, "num": {"N": "123450"}}
    assert item_size_bytes(item) == (1 + 5) + (3 + 3) + (3 + 4)


def test_a_session_item_at_100_streams_is_under_the_kilobyte_the_classifier_bills(
    dynamodb: Any, table: str
) -> None:
    """At 100 streams (seqs around a million) the vector and the classifier's allowance for the
    rest of the item stay within one table unit; the item read back from the store, measured by
    DynamoDB's size rule, is indeed under 1 KB."""
    sessions = SessionStore(dynamodb, table)
    sessions.create(WorkerInfo("w1", WorkerState.RUNNING, NOW, NOW + LEASE_MS, 0, 100, "h", 1))
    vector = vector_of(100)
    sessions.renew(
        "w1", expires_at_ms=NOW + 30_000, now_ms=NOW, active_streams=100, checkpoints=vector
    )
    item = dynamodb.get_item(
        TableName=table, Key={PK: {"S": worker_key("w1")}}, ConsistentRead=True
    )["Item"]
    assert table_units({"ExpressionAttributeValues": {":cps": {"B": vector}}}) == 1
    assert item_size_bytes(item) < 1024
