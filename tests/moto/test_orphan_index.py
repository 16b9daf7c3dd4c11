"""The orphan index (by-shard-expiry): a stream is in it exactly while it is STARTED and no
session holds it, whoever wrote it last; sessions read it in segments, per-stream leases in
their one shard; the backfill of a migrating table."""

from __future__ import annotations

from typing import Any

import pytest
from stream_items import put_stream

from lambdas.stream_repo import StreamRepo
from streamlease import dynamo, expiry_index
from streamlease.errors import LeaseConflict
from streamlease.index_backfill import backfill
from streamlease.indexes import BY_SHARD_EXPIRY, expiry_shard
from streamlease.lease_store import LeaseStore
from streamlease.schema import PK, DesiredState, Liveness, StreamAttr, stream_key

NOW = 1_800_000_000_000
LEASE_MS = 20_000
CUTOFF = NOW + 1


@pytest.fixture
def table(aws_settings: Any) -> str:
    return str(aws_settings.table_name)


@pytest.fixture
def repo(dynamodb: Any, table: str) -> StreamRepo:
    return StreamRepo(dynamodb, table)


def indexed(dynamodb: Any, table: str) -> dict[str, str]:
    """Stream id → shard of every entry of by-shard-expiry."""
    items = dynamo.items(dynamodb.scan, {"TableName": table, "IndexName": BY_SHARD_EXPIRY.name})
    return {str(i[PK]).removeprefix("CONN#"): str(i[StreamAttr.EXPIRY_SHARD]) for i in items}


def test_a_created_stream_is_in_the_index_at_once(repo: StreamRepo, dynamodb: Any, table: str):
    """New streams are orphans until someone takes them, as DESIGN's expiry 0 promised."""
    repo.create("s1", "wss://feed.example/s1", "ops")
    assert indexed(dynamodb, table) == {"s1": expiry_shard("s1", Liveness.SESSION)}


def test_a_session_acquire_takes_it_out_and_a_release_puts_it_back(
    repo: StreamRepo, store: LeaseStore, dynamodb: Any, table: str
):
    repo.create("s1", "wss://feed.example/s1", "ops")
    lease = store.acquire("s1", "w1", LEASE_MS, slot=0)
    assert indexed(dynamodb, table) == {}
    assert store.orphans(CUTOFF, limit=10) == []
    store.release("s1", "w1", lease.epoch, last_seq=3)
    assert [v.stream_id for v in store.orphans(CUTOFF + 10**12, limit=10)] == ["s1"]


def test_a_released_stream_that_was_stopped_meanwhile_stays_out(
    repo: StreamRepo, store: LeaseStore, dynamodb: Any, table: str
):
    """The holder releases after the stop it saw: the answer shows STOPPED, the entry goes."""
    repo.create("s1", "wss://feed.example/s1", "ops")
    lease = store.acquire("s1", "w1", LEASE_MS, slot=0)
    repo.set_desired_state("s1", DesiredState.STOPPED, "ops")
    store.release("s1", "w1", lease.epoch)
    assert indexed(dynamodb, table) == {}


def test_a_stream_started_while_its_session_still_holds_it_stays_out(
    repo: StreamRepo, store: LeaseStore, dynamodb: Any, table: str
):
    """Stopped and started again before its holder noticed: still held, so no entry; it gets
    one when its holder releases it."""
    repo.create("s1", "wss://feed.example/s1", "ops")
    lease = store.acquire("s1", "w1", LEASE_MS, slot=0)
    repo.set_desired_state("s1", DesiredState.STOPPED, "ops")
    repo.set_desired_state("s1", DesiredState.STARTED, "ops")
    assert indexed(dynamodb, table) == {}
    store.release("s1", "w1", lease.epoch)
    assert list(indexed(dynamodb, table)) == ["s1"]


def test_stop_and_start_of_a_free_stream_move_it_out_and_in(
    repo: StreamRepo, dynamodb: Any, table: str
):
    repo.create("s1", "wss://feed.example/s1", "ops")
    repo.set_desired_state("s1", DesiredState.STOPPED, "ops")
    assert indexed(dynamodb, table) == {}
    repo.set_desired_state("s1", DesiredState.STARTED, "ops")
    assert list(indexed(dynamodb, table)) == ["s1"]


def test_a_takeover_keeps_it_out_and_a_freed_dead_stream_goes_in(
    repo: StreamRepo, store: LeaseStore, dynamodb: Any, table: str
):
    """Owner to owner writes no entry; a dead session's stream freed for others gets one
    (only if STARTED)."""
    for s in ("a", "b", "c"):
        repo.create(s, f"wss://feed.example/{s}", "ops")
    epochs = {s: store.acquire(s, "dead", LEASE_MS, slot=n).epoch for n, s in enumerate("abc")}
    repo.set_desired_state("c", DesiredState.STOPPED, "ops")
    store.take_from("a", "dead", epochs["a"], None, "w1", 0)
    store.release_for("b", "dead", epochs["b"], None)
    store.release_for("c", "dead", epochs["c"], None)
    assert list(indexed(dynamodb, table)) == ["b"]


def test_a_stale_entry_of_a_stopped_stream_goes_with_the_acquire_that_finds_it(
    store: LeaseStore, dynamodb: Any, table: str
):
    """An entry left behind (an alignment that got no answer) costs one failed acquire."""
    put_stream(dynamodb, table, "s1", state=DesiredState.STOPPED)
    dynamodb.update_item(
        TableName=table,
        Key={PK: {"S": stream_key("s1")}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": StreamAttr.EXPIRY_SHARD},
        ExpressionAttributeValues={":s": {"S": expiry_shard("s1", Liveness.SESSION)}},
    )
    with pytest.raises(LeaseConflict):
        store.acquire("s1", "w1", LEASE_MS, slot=0)
    assert indexed(dynamodb, table) == {}


def test_the_segments_of_a_scan_cover_every_orphan_once(
    store: LeaseStore, dynamodb: Any, table: str
):
    """Each worker of a large fleet reads one segment; together they read every orphan."""
    ids = {f"s{i}" for i in range(60)}
    for s in ids:
        put_stream(dynamodb, table, s)
    put_stream(dynamodb, table, "held", owner="w", expires_ms=NOW + 60_000)
    segments = [
        {v.stream_id for v in store.orphans(CUTOFF, limit=100, segment=k, segments=8)}
        for k in range(8)
    ]
    assert set().union(*segments) == ids
    assert sum(len(s) for s in segments) == len(ids)
    assert {v.stream_id for v in store.orphans(CUTOFF, limit=100)} == ids


def test_per_stream_leases_stay_in_their_one_shard(dynamodb: Any, table: str):
    """A per-stream fleet's leases and free streams share one partition, by expiry."""
    store = LeaseStore(dynamodb, table, liveness=Liveness.STREAM)
    put_stream(dynamodb, table, "s1", liveness=Liveness.STREAM)
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    assert indexed(dynamodb, table) == {"s1": expiry_shard("s1", Liveness.STREAM)}
    assert [v.stream_id for v in store.expiring_before(NOW + 2 * LEASE_MS, limit=5)] == ["s1"]
    store.release("s1", "w1", lease.epoch, now_ms=NOW + 1)
    assert indexed(dynamodb, table) == {"s1": expiry_shard("s1", Liveness.STREAM)}


def test_a_per_stream_fleet_finds_what_a_session_fleet_left_in_its_other_shards(
    dynamodb: Any, table: str
):
    """Free streams a session fleet keyed into its many shards: the per-stream query of its one
    shard sees only those in that shard, a whole read every free one (not a live lease, up to
    the limit); an acquire moves an entry into the per-stream shard."""
    per_stream = expiry_shard("x", Liveness.STREAM)
    names = [f"s{n}" for n in range(100_000)]
    ids = [s for s in names if expiry_shard(s, Liveness.SESSION) == per_stream][:3]
    ids += [s for s in names if s not in ids][:40]  # most hash to the session fleet's others
    for s in ids:
        put_stream(dynamodb, table, s)  # keyed for sessions, as their drain left them
    put_stream(dynamodb, table, "held", owner="w0", expires_ms=NOW + LEASE_MS)
    elsewhere = {s for s in ids if expiry_shard(s, Liveness.SESSION) != per_stream}
    assert elsewhere and len(elsewhere) < len(ids)
    store = LeaseStore(dynamodb, table, liveness=Liveness.STREAM)
    queried = {v.stream_id for v in store.expiring_before(CUTOFF, limit=200)}
    assert queried == set(ids) - elsewhere
    assert {v.stream_id for v in store.orphans(CUTOFF, limit=200)} == set(ids)
    assert len(store.orphans(CUTOFF, limit=3)) == 3
    taken = sorted(elsewhere)[0]
    store.acquire(taken, "w1", LEASE_MS, now_ms=NOW)
    assert indexed(dynamodb, table)[taken] == per_stream
    assert taken not in {v.stream_id for v in store.orphans(CUTOFF, limit=200)}


def test_the_backfill_gives_every_stream_the_entry_its_state_calls_for(
    store: LeaseStore, dynamodb: Any, table: str
):
    """A table written by the previous release: free streams without an entry get one, held
    and stopped ones get none, and a second run changes nothing."""
    for s in ("free1", "free2"):
        put_stream(dynamodb, table, s)
    put_stream(dynamodb, table, "stopped", state=DesiredState.STOPPED)
    store.acquire("free2", "w1", LEASE_MS, slot=0)
    for s in ("free1", "free2", "stopped"):
        dynamodb.update_item(
            TableName=table,
            Key={PK: {"S": stream_key(s)}},
            UpdateExpression="REMOVE #s",
            ExpressionAttributeNames={"#s": StreamAttr.EXPIRY_SHARD},
        )
    assert indexed(dynamodb, table) == {}
    first = backfill(dynamodb, table, Liveness.SESSION)
    assert (first["checked"], first["added"]) == (3, 1)
    assert list(indexed(dynamodb, table)) == ["free1"]
    again = backfill(dynamodb, table, Liveness.SESSION)
    assert (again["checked"], again["added"], again["removed"], again["rekeyed"]) == (3, 0, 0, 0)


def test_after_a_mode_switch_the_backfill_rekeys_the_free_streams(dynamodb: Any, table: str):
    """Streams freed by a session fleet carry its shards; a per-stream fleet reads one."""
    for s in ("a", "b", "c"):
        put_stream(dynamodb, table, s)  # keyed for sessions
    done = backfill(dynamodb, table, Liveness.STREAM)
    assert done["rekeyed"] == sum(
        expiry_shard(s, Liveness.SESSION) != expiry_shard(s, Liveness.STREAM) for s in "abc"
    )
    assert set(indexed(dynamodb, table).values()) == {expiry_shard("a", Liveness.STREAM)}


def test_alignment_yields_to_a_change_that_got_in_first(dynamodb: Any, table: str):
    """The item the caller saw is out of date: the conditional write changes nothing."""
    put_stream(dynamodb, table, "s1")
    seen = {StreamAttr.STREAM_ID: "s1", StreamAttr.DESIRED_STATE: DesiredState.STOPPED.value}
    seen[StreamAttr.EXPIRY_SHARD] = expiry_shard("s1", Liveness.SESSION)
    assert expiry_index.align(dynamodb, table, seen, Liveness.SESSION) is None
    assert list(indexed(dynamodb, table)) == ["s1"]
