"""The auditor's numbers on a prepared table, and the EMF document it publishes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from control_plane_support import load_event
from stream_items import put_stream as put_item
from stream_items import set_attributes

from lambdas import auditor, runtime
from local.lambda_context import LambdaContext
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY, FLEET
from streamlease.lease_store import wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import PK, SESSION_HELD_MS, DesiredState, StreamAttr, WorkerState
from streamlease.session_store import SessionStore

NOW = 1_800_000_000_000
A = StreamAttr


def put_stream(dynamodb: Any, table: str, stream_id: str, **fields: Any) -> None:
    """A stream item last updated at ``NOW`` unless told otherwise."""
    put_item(dynamodb, table, stream_id, **{"updated_ms": NOW, **fields})


def worker(worker_id: str, expires_ms: int) -> WorkerInfo:
    return WorkerInfo(
        worker_id=worker_id,
        state=WorkerState.RUNNING,
        heartbeat_at_ms=expires_ms - 20_000,
        expires_at_ms=expires_ms,
        active_streams=0,
        capacity=10,
        host="h",
        pid=1,
    )


@pytest.fixture
def prepared(
    control_plane: runtime.Runtime, dynamodb: Any, sessions: SessionStore
) -> runtime.Runtime:
    """3 owned, 3 orphaned (lapsed 30 s ago, released 45 s ago, new 90 s ago), 2 stopped;
    2 live workers and 1 whose item expired."""
    table = control_plane.settings.table_name
    for i in range(3):
        put_stream(dynamodb, table, f"owned{i}", owner=f"w{i}", expires_ms=NOW + 15_000)
    put_stream(dynamodb, table, "lapsed", owner="w-dead", expires_ms=NOW - 30_000)
    put_stream(dynamodb, table, "released", updated_ms=NOW - 45_000)
    put_stream(dynamodb, table, "new", updated_ms=NOW - 90_000)
    put_stream(dynamodb, table, "stopped", state=DesiredState.STOPPED, updated_ms=NOW - 999_000)
    put_stream(
        dynamodb, table, "draining", state=DesiredState.STOPPED, owner="w1", expires_ms=NOW - 1
    )
    sessions.create(worker("w-live-1", NOW + 10_000))
    sessions.create(worker("w-live-2", NOW + 1))
    sessions.create(worker("w-gone", NOW - 5_000))
    return control_plane


def test_audit_counts_on_a_prepared_table(prepared: runtime.Runtime) -> None:
    """Started 6 = owned 3 + orphaned 3; the oldest orphan is the 90 s old new stream."""
    audit = auditor.run_audit(prepared, NOW)
    assert audit == auditor.Audit(
        started_streams=6,
        owned_streams=3,
        orphaned_streams=3,
        oldest_orphan_age_seconds=90.0,
        live_workers=2,
    )


def test_oldest_orphan_by_lapsed_lease(control_plane: runtime.Runtime, dynamodb: Any) -> None:
    """With only a lapsed lease orphaned, its age counts from the lease expiry."""
    table = control_plane.settings.table_name
    put_stream(dynamodb, table, "lapsed", owner="w", expires_ms=NOW - 12_500)
    put_stream(dynamodb, table, "fresh", updated_ms=NOW - 2_000)
    audit = auditor.run_audit(control_plane, NOW)
    assert (audit.orphaned_streams, audit.oldest_orphan_age_seconds) == (2, 12.5)


def test_empty_table_is_all_zeros(control_plane: runtime.Runtime) -> None:
    """No streams, no workers: every number is zero (still published)."""
    assert auditor.run_audit(control_plane, NOW) == auditor.Audit(0, 0, 0, 0.0, 0)


def test_a_lease_expiring_exactly_now_is_still_owned(
    control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """Owned means expiry >= now; orphaned means expiry < now. Each stream is counted once."""
    table = control_plane.settings.table_name
    put_stream(dynamodb, table, "edge", owner="w", expires_ms=NOW)
    put_stream(dynamodb, table, "past", owner="w", expires_ms=NOW - 1)
    audit = auditor.run_audit(control_plane, NOW)
    assert (audit.owned_streams, audit.orphaned_streams) == (1, 1)


def test_handler_publishes_every_metric_as_emf(
    control_plane: runtime.Runtime,
    dynamodb: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The scheduled event yields one EMF document with the five metrics, zeros included."""
    now = wall_ms()
    put_stream(dynamodb, control_plane.settings.table_name, "o", owner="w", expires_ms=now + 60_000)
    result = auditor.handler(load_event("scheduled_auditor"), LambdaContext())
    assert result["started_streams"] == 1
    documents = [
        json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line
    ]
    assert len(documents) == 1
    doc = documents[0]
    directive = doc["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == control_plane.settings.metrics_namespace
    assert directive["Dimensions"] == [["service"]]
    assert doc["service"] == "streamlease-auditor"
    units = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert units == {
        "StartedStreams": "Count",
        "OwnedStreams": "Count",
        "OrphanedStreams": "Count",
        "OldestOrphanAgeSeconds": "Seconds",
        "LiveWorkers": "Count",
        "ConnectingStreams": "Count",
        "ConnectedStreams": "Count",
        "RetryingStreams": "Count",
        "RejectedStreams": "Count",
        "StalledStreams": "Count",
        "MalformedStreams": "Count",
        "SinkFailingStreams": "Count",
        "TroubleStreams": "Count",
    }
    assert (doc["StartedStreams"], doc["OwnedStreams"], doc["OrphanedStreams"]) == (
        [1.0],
        [1.0],
        [0.0],
    )
    assert (doc["OldestOrphanAgeSeconds"], doc["LiveWorkers"]) == ([0.0], [0.0])


def test_audit_reads_no_stream_payloads(
    prepared: runtime.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Index reads only (the fleet, by-holder and the orphan index: keys and a few projected
    attributes, partitions spread over owners and shards) and a small keyed read of updated_at:
    never a scan of the table, never a stream's payload."""
    calls: list[tuple[str, dict[str, Any]]] = []
    client = prepared.dynamodb
    for operation in ("query", "scan", "batch_get_item", "get_item"):
        original = getattr(client, operation)

        def spy(_op: str = operation, _orig: Any = original, **kwargs: Any) -> Any:
            calls.append((_op, kwargs))
            return _orig(**kwargs)

        monkeypatch.setattr(client, operation, spy)
    auditor.run_audit(prepared, NOW)
    assert {op for op, _ in calls} <= {"query", "scan", "batch_get_item"}
    scanned = {kwargs.get("IndexName") for op, kwargs in calls if op == "scan"}
    assert scanned == {BY_OWNER.name, BY_SHARD_EXPIRY.name}
    assert all(kwargs["IndexName"] == FLEET.name for op, kwargs in calls if op == "query")
    for op, kwargs in calls:
        if op == "batch_get_item":
            projected = kwargs["RequestItems"][prepared.settings.table_name]
            assert set(projected["ExpressionAttributeNames"].values()) == {PK, A.UPDATED_AT}


def test_streams_of_a_dead_session_are_orphans_aged_from_its_expiry(
    control_plane: runtime.Runtime, dynamodb: Any, sessions: SessionStore
) -> None:
    """A session's streams are owned while it is live; a tombstoned session's, or one whose
    expiry passed, are orphans from the moment its renewals stopped counting."""
    table = control_plane.settings.table_name
    sessions.create(worker("alive", NOW + 10_000))
    sessions.create(worker("lapsed", NOW - 8_000))
    sessions.create(worker("tombstoned", NOW + 10_000))
    sessions.expire("tombstoned", by="peer", seen_hb=None)
    for owner, count in (("alive", 3), ("lapsed", 2), ("tombstoned", 1), ("gone", 1)):
        for n in range(count):
            put_stream(dynamodb, table, f"{owner}{n}", owner=owner, expires_ms=SESSION_HELD_MS)
    audit = auditor.run_audit(control_plane, NOW)
    assert (audit.started_streams, audit.owned_streams, audit.orphaned_streams) == (7, 3, 4)
    assert audit.oldest_orphan_age_seconds == 8.0
    assert audit.live_workers == 1


def test_streams_of_a_session_that_is_gone_are_orphans_aged_from_their_last_write(
    control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """A stream held through a session whose item is gone (deleted while the stream hung on
    it) is an orphan whose age counts from its holder's last write: never 0 for ever."""
    table = control_plane.settings.table_name
    put_stream(
        dynamodb, table, "stuck", owner="gone", expires_ms=SESSION_HELD_MS, updated_ms=NOW - 40_000
    )
    audit = auditor.run_audit(control_plane, NOW)
    assert (audit.orphaned_streams, audit.oldest_orphan_age_seconds) == (1, 40.0)


def test_owned_streams_are_counted_by_connection_state(
    control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """Owned streams per connection state; an orphan counts in none of them."""
    table = control_plane.settings.table_name
    for name, state in (("a", "connected"), ("b", "connected"), ("c", "rejected"), ("d", None)):
        put_stream(dynamodb, table, name, owner="w", expires_ms=NOW + 10_000)
        if state is not None:
            dynamodb.update_item(
                TableName=table,
                Key={PK: {"S": f"CONN#{name}"}},
                UpdateExpression="SET #c = :c",
                ExpressionAttributeNames={"#c": A.CONNECTION_STATE},
                ExpressionAttributeValues={":c": {"S": state}},
            )
    put_stream(dynamodb, table, "orphan", updated_ms=NOW)
    audit = auditor.run_audit(control_plane, NOW)
    assert (audit.connected_streams, audit.rejected_streams, audit.retrying_streams) == (2, 1, 0)
    assert (audit.owned_streams, audit.orphaned_streams) == (4, 1)


def test_streams_in_trouble_are_counted_by_state_and_in_all(
    control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """Stalled, malformed, sink failing, rejected and retrying owned streams each have their
    count, and TroubleStreams is all of them; an orphan counts in none."""
    table = control_plane.settings.table_name
    states = {
        "ok": "connected",
        "quiet1": "stalled",
        "quiet2": "stalled",
        "noseq": "malformed",
        "sink": "sink_failing",
        "refused": "rejected",
        "flap": "retrying",
    }
    for name, state in states.items():
        put_stream(dynamodb, table, name, owner="w", expires_ms=NOW + 10_000)
        set_attributes(dynamodb, table, name, {A.CONNECTION_STATE: state})
    put_stream(dynamodb, table, "orphan", owner="w", expires_ms=NOW - 1)
    set_attributes(dynamodb, table, "orphan", {A.CONNECTION_STATE: "stalled"})
    audit = auditor.run_audit(control_plane, NOW)
    assert (
        audit.stalled_streams,
        audit.malformed_streams,
        audit.sink_failing_streams,
        audit.rejected_streams,
        audit.retrying_streams,
    ) == (2, 1, 1, 1, 1)
    assert audit.trouble_streams == 6
    metrics = audit.metrics()
    assert (metrics["StalledStreams"], metrics["TroubleStreams"]) == (2, 6)
