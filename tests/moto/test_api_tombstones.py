"""Delete leaves a tombstone: epochs and generations of a stream id never go back (architecture §4).

A deleted stream's item keeps only ``lease_epoch``, ``generation`` and ``deleted_at``; it reads
as missing everywhere, and creating the id again continues above its counters.
"""

from __future__ import annotations

from typing import Any

import pytest
from control_plane_support import Api
from test_api_concurrency import instance_repo, run_in_threads

from lambdas import auditor, reaper, runtime
from lambdas.stream_repo import StreamConflict
from local.lambda_context import LambdaContext
from streamlease import dynamo
from streamlease.errors import LeaseConflict, LeaseLost
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY, BY_STATE
from streamlease.lease_store import LeaseStore, wall_ms
from streamlease.model import Stream, is_tombstone
from streamlease.schema import PK, DesiredState, StreamAttr, stream_key
from streamlease.seqs import NOTHING_DELIVERED

URL = "wss://feed.example.com/v1/ticker"
OTHER_URL = "wss://feed.example.com/v2/ticker"
LEASE_MS = 20_000


def raw_item(rt: runtime.Runtime, stream_id: str) -> dict[str, Any] | None:
    item = rt.dynamodb.get_item(
        TableName=rt.settings.table_name,
        Key={PK: {"S": stream_key(stream_id)}},
        ConsistentRead=True,
    ).get("Item")
    return None if item is None else dynamo.plain(item)


def used_and_deleted(api: Api, store: LeaseStore, stream_id: str = "s1", takes: int = 3) -> None:
    """Create, acquire ``takes`` times (epoch = takes), checkpoint, stop and delete."""
    assert api("POST", "/streams", body={"id": stream_id, "ws_url": URL}).status == 201
    for _ in range(takes):
        lease = store.acquire(stream_id, "w-1", LEASE_MS)
        store.renew(
            stream_id, "w-1", lease.epoch, 42, LEASE_MS, previous_expires_ms=lease.expires_at_ms
        )
        store.release(stream_id, "w-1", lease.epoch, last_seq=42, last_error="upstream closed")
    assert api("POST", f"/streams/{stream_id}/stop").status == 202
    assert api("DELETE", f"/streams/{stream_id}").status == 204


# --- what delete leaves --------------------------------------------------------------------------


def test_delete_leaves_only_epoch_generation_and_deletion_time(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime
) -> None:
    """The tombstone keeps the counters and when; URL, state, owner, seq and the rest are gone."""
    used_and_deleted(api, store)
    item = raw_item(control_plane, "s1")
    assert item is not None and is_tombstone(item)
    assert set(item) == {PK, StreamAttr.LEASE_EPOCH, StreamAttr.GENERATION, StreamAttr.DELETED_AT}
    assert (item[StreamAttr.LEASE_EPOCH], item[StreamAttr.GENERATION]) == (3, 2)


def test_a_tombstone_is_in_no_index(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime
) -> None:
    """Without desired_state or lease_owner the tombstone drops out of every stream index."""
    used_and_deleted(api, store)
    client, table = control_plane.dynamodb, control_plane.settings.table_name
    for index in (BY_STATE, BY_SHARD_EXPIRY, BY_OWNER):
        scanned = client.scan(TableName=table, IndexName=index.name)["Items"]
        assert scanned == [], index.name


def test_a_deleted_stream_reads_as_missing_everywhere(api: Api, store: LeaseStore) -> None:
    """GET, stop, start and a second DELETE are 404; no listing shows it."""
    used_and_deleted(api, store)
    for method, path in (
        ("GET", "/streams/s1"),
        ("POST", "/streams/s1/stop"),
        ("POST", "/streams/s1/start"),
        ("DELETE", "/streams/s1"),
    ):
        result = api(method, path)
        assert (result.status, result.error["code"]) == (404, "not_found"), (method, path)
    for query in ({}, {"state": "STARTED"}, {"state": "STOPPED"}):
        assert api("GET", "/streams", query=query).body == {"streams": [], "next_token": None}


def test_stop_and_start_of_a_deleted_stream_write_nothing(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime
) -> None:
    """A 404 from stop or start leaves the tombstone exactly as it was."""
    used_and_deleted(api, store)
    before = raw_item(control_plane, "s1")
    api("POST", "/streams/s1/start")
    api("POST", "/streams/s1/stop")
    assert raw_item(control_plane, "s1") == before


# --- the lease store meets a tombstone ------------------------------------------------------------


def test_lease_store_reads_a_tombstone_as_missing(api: Api, store: LeaseStore) -> None:
    """read() returns None for a deleted stream."""
    used_and_deleted(api, store)
    assert store.read("s1") is None


def test_acquire_of_a_tombstone_fails_as_missing(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime
) -> None:
    """A late START command for a deleted stream finds it missing and writes nothing."""
    used_and_deleted(api, store)
    before = raw_item(control_plane, "s1")
    with pytest.raises(LeaseConflict) as conflict:
        store.acquire("s1", "w-2", LEASE_MS)
    assert conflict.value.reason == "missing"
    assert raw_item(control_plane, "s1") == before


def test_a_tombstone_is_not_a_stream() -> None:
    """Stream.from_item refuses a tombstone instead of showing a STOPPED stream with no URL."""
    tombstone = {
        PK: stream_key("s1"),
        StreamAttr.LEASE_EPOCH: 3,
        StreamAttr.GENERATION: 2,
        StreamAttr.DELETED_AT: "2026-11-30T10:00:00.000Z",
    }
    with pytest.raises(ValueError, match="tombstone"):
        Stream.from_item(tombstone)


# --- re-creating the id --------------------------------------------------------------------------


def test_recreate_continues_above_the_old_epoch_and_generation(api: Api, store: LeaseStore) -> None:
    """The new stream starts past every epoch and generation of the old one, with nothing
    delivered (the old stream's checkpoint is not its)."""
    used_and_deleted(api, store)
    result = api("POST", "/streams", body={"id": "s1", "ws_url": OTHER_URL})
    assert result.status == 201
    stream = result.body
    assert (stream["ws_url"], stream["desired_state"]) == (OTHER_URL, "STARTED")
    assert (stream["epoch"], stream["generation"], stream["last_seq"]) == (4, 3, None)
    assert (stream["owner"], stream["takeovers"], stream["last_error"]) == (None, 0, None)
    assert api("GET", "/streams/s1").body == stream
    lease = store.acquire("s1", "w-2", LEASE_MS)
    assert (lease.epoch, lease.last_seq, lease.ws_url) == (5, NOTHING_DELIVERED, OTHER_URL)


def test_recreated_stream_is_listed_and_started(api: Api, store: LeaseStore, commands: Any) -> None:
    """Back in the by-state index as STARTED, and a START hint with the new generation sent."""
    used_and_deleted(api, store)
    commands.drain()
    api("POST", "/streams", body={"id": "s1", "ws_url": URL})
    listed = api("GET", "/streams", query={"state": "STARTED"}).body["streams"]
    assert [(s["id"], s["generation"]) for s in listed] == [("s1", 3)]
    assert [(c.stream_id, c.generation) for c in commands.drain()] == [("s1", 3)]


def test_an_old_holder_cannot_touch_the_recreated_stream(api: Api, store: LeaseStore) -> None:
    """The old epoch is dead: a release or renewal of it fails against the new stream."""
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    old = store.acquire("s1", "w-old", LEASE_MS, now_ms=1_000)  # lapsed long ago
    api("POST", "/streams/s1/stop")
    assert api("DELETE", "/streams/s1").status == 204
    api("POST", "/streams", body={"id": "s1", "ws_url": URL})
    with pytest.raises(LeaseLost):
        store.renew("s1", "w-old", old.epoch, 99, LEASE_MS)
    with pytest.raises(LeaseLost):
        store.release("s1", "w-old", old.epoch, last_seq=99)
    assert api("GET", "/streams/s1").body["last_seq"] is None


def test_recreate_is_one_conditional_update(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Create on a tombstone reads nothing first and writes once: nothing half-written."""
    used_and_deleted(api, store)
    calls: list[tuple[str, dict[str, Any]]] = []
    client = control_plane.dynamodb
    for operation in ("get_item", "put_item", "update_item", "delete_item"):
        original = getattr(client, operation)

        def spy(_op: str = operation, _orig: Any = original, **kwargs: Any) -> Any:
            calls.append((_op, kwargs))
            return _orig(**kwargs)

        monkeypatch.setattr(client, operation, spy)
    assert control_plane.repo.create("s1", URL, "test")[1] is True
    assert [op for op, _ in calls] == ["update_item"]
    assert "ConditionExpression" in calls[0][1]


def test_same_id_and_url_on_a_live_stream_stays_a_no_op(api: Api) -> None:
    """Create is still idempotent on a live stream (200), and another URL still conflicts."""
    first = api("POST", "/streams", body={"id": "s1", "ws_url": URL})
    again = api("POST", "/streams", body={"id": "s1", "ws_url": URL})
    assert (again.status, again.body) == (200, first.body)
    other = api("POST", "/streams", body={"id": "s1", "ws_url": OTHER_URL})
    assert (other.status, other.error["field"]) == (409, "ws_url")


def test_racing_creates_on_a_tombstone_make_one_stream(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime
) -> None:
    """Of concurrent creates of a deleted id exactly one creates; the rest see its stream."""
    used_and_deleted(api, store)

    def create(index: int) -> tuple[bool, int] | str:
        try:
            stream, created = instance_repo(control_plane).create("s1", URL, f"c{index}")
        except StreamConflict as exc:
            return str(exc)
        return created, stream.epoch

    results = run_in_threads(create, 6)
    assert sorted(r for r in results if isinstance(r, tuple)) == [(False, 4)] * 5 + [(True, 4)]
    item = raw_item(control_plane, "s1")
    assert item is not None and item[StreamAttr.DESIRED_STATE] == DesiredState.STARTED


# --- the other Lambdas meet a tombstone ----------------------------------------------------------


def test_the_auditor_counts_no_tombstone(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime
) -> None:
    """A deleted stream is neither wanted nor an orphan."""
    used_and_deleted(api, store)
    audit = auditor.run_audit(control_plane, wall_ms())
    assert (audit.started_streams, audit.orphaned_streams) == (0, 0)


def test_the_reaper_leaves_a_tombstone_alone(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime, commands: Any
) -> None:
    """A dead task whose lapsed lease was on a since-deleted stream: nothing released or sent."""
    task_arn = "arn:aws:ecs:us-east-1:123456789012:task/streamlease/0123456789abcdef"
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    store.acquire("s1", "0123456789abcdef/7-ab12", LEASE_MS, now_ms=1_000)
    api("POST", "/streams/s1/stop")
    assert api("DELETE", "/streams/s1").status == 204
    before = raw_item(control_plane, "s1")
    commands.drain()
    result = reaper.handler(reaper.stopped_task_event(task_arn), LambdaContext())
    assert (result["released"], result["handoffs"]) == (0, 0)
    assert raw_item(control_plane, "s1") == before
    assert commands.drain() == []
