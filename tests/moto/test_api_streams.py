"""The REST API's routes against the moto server: every success and failure path
(architecture §6)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from control_plane_support import OPERATOR_ARN, Api, CommandQueue, load_event

from lambdas import runtime
from lambdas.api import handler
from local.lambda_context import LambdaContext
from streamlease import checkpoints
from streamlease.commands import CommandType
from streamlease.lease_store import LeaseStore, wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import PK, ConnectionState, DesiredState, WorkerState, stream_key
from streamlease.seqs import NOTHING_DELIVERED
from streamlease.session_store import SessionStore

URL = "wss://feed.example.com/v1/ticker"
OTHER_URL = "wss://feed.example.com/v2/ticker"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
STREAM_FIELDS = {
    "id",
    "ws_url",
    "desired_state",
    "owner",
    "lease_state",
    "lease_expires_at_ms",
    "lease_remaining_ms",
    "owned_since",
    "epoch",
    "last_seq",
    "last_seq_at",
    "msgs_per_s",
    "rate_since",
    "generation",
    "takeovers",
    "connection_state",
    "connection_since",
    "frames_received",
    "frames_delivered",
    "frames_malformed",
    "frames_control",
    "seq_gaps",
    "progress_at",
    "last_message_at",
    "last_error_active",
    "profile",
    "failover_note",
    "last_error",
    "last_error_at",
    "created_at",
    "updated_at",
    "created_by",
    "updated_by",
    "warnings",
}


def create(api: Api, stream_id: str = "s1", url: str = URL) -> Any:
    return api("POST", "/streams", body={"id": stream_id, "ws_url": url})


def raw_item(dynamodb: Any, table: str, stream_id: str) -> dict[str, Any] | None:
    item = dynamodb.get_item(
        TableName=table, Key={PK: {"S": stream_key(stream_id)}}, ConsistentRead=True
    ).get("Item")
    return None if item is None else dict(item)


# --- create ------------------------------------------------------------------------------------


def test_stored_create_event_creates_the_stream(
    control_plane: runtime.Runtime, commands: CommandQueue
) -> None:
    """The stored API Gateway event creates the stream: 201 with the full stream document."""
    response = handler(load_event("api_rest_create_stream"), LambdaContext())
    assert response["statusCode"] == 201
    body = json.loads(response["body"])
    assert set(body) == STREAM_FIELDS
    assert body["id"] == "btc-usd"
    assert body["desired_state"] == "STARTED"
    assert (body["generation"], body["epoch"], body["takeovers"]) == (1, 0, 0)
    assert body["last_seq"] is None, "nothing delivered yet: no misleading 0"
    assert (body["owner"], body["lease_state"], body["lease_remaining_ms"]) == (None, "free", 0)
    assert body["created_by"] == body["updated_by"] == OPERATOR_ARN
    assert ISO_MS.match(body["created_at"]) and body["created_at"] == body["updated_at"]
    assert [(c.type, c.stream_id, c.generation) for c in commands.drain()] == [
        (CommandType.START, "btc-usd", 1)
    ]


def test_new_stream_item_is_in_the_index_and_unleased(
    api: Api, dynamodb: Any, control_plane: runtime.Runtime
) -> None:
    """A new item has lease_expires_at_ms 0 (so the orphan index sees it), no owner, and
    last_seq NOTHING_DELIVERED (-1): its feed's seq 0 is still to come."""
    assert create(api).status == 201
    item = raw_item(dynamodb, control_plane.settings.table_name, "s1")
    assert item is not None
    assert item["lease_expires_at_ms"] == {"N": "0"}
    assert item["lease_epoch"] == {"N": "0"}
    assert item["last_seq"] == {"N": str(NOTHING_DELIVERED)}
    assert "lease_owner" not in item


def test_repeated_create_is_a_no_op(api: Api, commands: CommandQueue) -> None:
    """The same id and URL again answers 200 with the stream unchanged."""
    first = create(api)
    again = create(api)
    assert (first.status, again.status) == (201, 200)
    assert again.body == {**first.body, "lease_remaining_ms": again.body["lease_remaining_ms"]}


def test_create_with_another_url_conflicts(
    api: Api, dynamodb: Any, control_plane: runtime.Runtime
) -> None:
    """The same id with a different URL is 409 naming ws_url, and the item is unchanged."""
    create(api)
    before = raw_item(dynamodb, control_plane.settings.table_name, "s1")
    result = create(api, url=OTHER_URL)
    assert result.status == 409
    assert result.error["field"] == "ws_url"
    assert raw_item(dynamodb, control_plane.settings.table_name, "s1") == before


def test_repeated_create_of_a_stopped_stream_does_not_start_it(
    api: Api, commands: CommandQueue
) -> None:
    """Re-creating a stopped stream is a no-op: it stays STOPPED and no START is sent."""
    create(api)
    api("POST", "/streams/s1/stop")
    commands.drain()
    result = create(api)
    assert (result.status, result.body["desired_state"]) == (200, "STOPPED")
    assert commands.drain() == []


def test_caller_falls_back_to_caller_id_then_anonymous(api: Api) -> None:
    """Without a user ARN the IAM caller id is recorded; with neither, "anonymous"."""
    one = api(
        "POST", "/streams", body={"id": "a", "ws_url": URL}, identity={"caller": "AIDAX:role"}
    )
    two = api("POST", "/streams", body={"id": "b", "ws_url": URL}, identity={})
    assert one.body["created_by"] == "AIDAX:role"
    assert two.body["created_by"] == "anonymous"


# --- stop / start ------------------------------------------------------------------------------


def test_stop_bumps_generation_and_is_idempotent(api: Api) -> None:
    """Stop answers 202 with generation + 1; stopping again answers 200 and changes nothing."""
    create(api)
    stopped = api("POST", "/streams/s1/stop", identity={"userArn": "arn:aws:iam::1:user/ops"})
    again = api("POST", "/streams/s1/stop")
    assert (stopped.status, stopped.body["desired_state"], stopped.body["generation"]) == (
        202,
        "STOPPED",
        2,
    )
    assert stopped.body["updated_by"] == "arn:aws:iam::1:user/ops"
    assert (again.status, again.body["generation"]) == (200, 2)


def test_start_sends_a_start_command_with_the_new_generation(
    api: Api, commands: CommandQueue
) -> None:
    """Start of a stopped stream answers 202, generation + 1, and sends START at that generation."""
    create(api)
    api("POST", "/streams/s1/stop")
    commands.drain()
    started = api("POST", "/streams/s1/start")
    assert (started.status, started.body["desired_state"], started.body["generation"]) == (
        202,
        "STARTED",
        3,
    )
    assert [(c.type, c.generation) for c in commands.drain()] == [(CommandType.START, 3)]


def test_start_of_a_started_stream_changes_nothing(api: Api, commands: CommandQueue) -> None:
    """Starting a STARTED stream answers 200 at the same generation (the hint is re-sent)."""
    create(api)
    commands.drain()
    result = api("POST", "/streams/s1/start")
    assert (result.status, result.body["generation"]) == (200, 1)
    assert [(c.type, c.generation) for c in commands.drain()] == [(CommandType.START, 1)]


def test_stop_does_not_touch_the_lease(api: Api, store: LeaseStore) -> None:
    """The owner keeps its lease fields; it learns of the stop through its renewal."""
    create(api)
    lease = store.acquire("s1", "w-1", 20_000)
    result = api("POST", "/streams/s1/stop")
    assert result.status == 202
    assert (result.body["owner"], result.body["epoch"]) == ("w-1", lease.epoch)
    assert result.body["lease_expires_at_ms"] == lease.expires_at_ms


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/streams/missing/stop"),
        ("POST", "/streams/missing/start"),
        ("GET", "/streams/missing"),
        ("DELETE", "/streams/missing"),
    ],
)
def test_missing_stream_is_404(api: Api, method: str, path: str) -> None:
    """Every per-stream route answers 404 naming id for a stream that does not exist."""
    result = api(method, path)
    assert (result.status, result.error["code"], result.error["field"]) == (404, "not_found", "id")


def test_stop_and_start_on_a_missing_stream_create_nothing(
    api: Api, dynamodb: Any, control_plane: runtime.Runtime
) -> None:
    """A stop or start of an unknown id does not create an item."""
    api("POST", "/streams/ghost/stop")
    api("POST", "/streams/ghost/start")
    assert raw_item(dynamodb, control_plane.settings.table_name, "ghost") is None


# --- get ---------------------------------------------------------------------------------------


def test_get_answers_who_since_when_how_far_and_what_went_wrong(
    api: Api, store: LeaseStore
) -> None:
    """One GET shows owner, owned_since, lease left, epoch, last_seq and the last error."""
    create(api)
    lease = store.acquire("s1", "w-1", 20_000)
    store.renew("s1", "w-1", lease.epoch, 41, 20_000, previous_expires_ms=lease.expires_at_ms)
    store.record_connection(
        "s1", "w-1", lease.epoch, ConnectionState.RETRYING, "upstream closed 1011"
    )
    body = api("GET", "/streams/s1").body
    assert body["owner"] == "w-1"
    assert body["lease_state"] == "held"
    assert 0 < body["lease_remaining_ms"] <= 20_000
    assert ISO_MS.match(body["owned_since"])
    assert (body["epoch"], body["last_seq"]) == (1, 41)
    assert body["last_error"] == "upstream closed 1011"
    assert ISO_MS.match(body["last_error_at"])
    assert (body["connection_state"], body["last_error_active"]) == ("retrying", True)
    assert ISO_MS.match(body["connection_since"])


def test_get_of_a_session_lease_shows_its_sessions_expiry_and_live_checkpoint(
    api: Api, store: LeaseStore, sessions: SessionStore
) -> None:
    """A lease attached to a session lasts as its session does; how far the stream got rides on
    the session's renewals, not on the stream item."""
    create(api)
    now = wall_ms()
    sessions.create(WorkerInfo("w-1", WorkerState.RUNNING, now, now + 20_000, 0, 10, "h", 1))
    lease = store.acquire("s1", "w-1", 20_000, slot=0)
    sessions.renew(
        "w-1",
        expires_at_ms=now + 25_000,
        now_ms=now,
        active_streams=1,
        checkpoints=checkpoints.encode(
            [checkpoints.Checkpoint(lease.epoch, 77, checkpoints.stream_tag("s1"))]
        ),
    )
    body = api("GET", "/streams/s1").body
    assert (body["owner"], body["lease_state"], body["last_seq"]) == ("w-1", "held", 77)
    assert body["lease_expires_at_ms"] == now + 25_000
    sessions.expire("w-1", by="peer", seen_hb=None)
    body = api("GET", "/streams/s1").body
    assert (body["lease_state"], body["lease_remaining_ms"]) == ("expired", 0)


def test_get_of_a_session_lease_that_delivered_nothing_or_only_seq_0(
    api: Api, store: LeaseStore, sessions: SessionStore
) -> None:
    """An empty vector slot leaves the item's "nothing delivered" (null, not 0); an entry of 0
    says seq 0 was delivered."""
    create(api)
    now = wall_ms()
    sessions.create(WorkerInfo("w-1", WorkerState.RUNNING, now, now + 20_000, 0, 10, "h", 1))
    lease = store.acquire("s1", "w-1", 20_000, slot=0)
    sessions.renew(
        "w-1", expires_at_ms=now + 25_000, now_ms=now, active_streams=1, checkpoints=b"\x02"
    )
    assert api("GET", "/streams/s1").body["last_seq"] is None
    sessions.renew(
        "w-1",
        expires_at_ms=now + 26_000,
        now_ms=now + 1,
        active_streams=1,
        checkpoints=checkpoints.encode(
            [checkpoints.Checkpoint(lease.epoch, 0, checkpoints.stream_tag("s1"))]
        ),
    )
    assert api("GET", "/streams/s1").body["last_seq"] == 0


def test_get_shows_a_lapsed_lease_as_expired(api: Api, store: LeaseStore) -> None:
    """A holder that stopped renewing is still named, with 0 ms left and state expired."""
    create(api)
    store.acquire("s1", "w-1", 20_000, now_ms=wall_ms() - 60_000)
    body = api("GET", "/streams/s1").body
    assert (body["owner"], body["lease_state"], body["lease_remaining_ms"]) == (
        "w-1",
        "expired",
        0,
    )


def test_percent_encoded_id_in_the_path(api: Api) -> None:
    """A client may escape ':' in the path (REST APIs pass the path still encoded)."""
    create(api, "feed:btc")
    assert api("GET", "/streams/feed%3Abtc").body["id"] == "feed:btc"


def test_escaped_slash_never_changes_the_route(api: Api) -> None:
    """An escaped '/' stays escaped: it is an invalid id, not a path separator."""
    create(api, "x")
    assert api("GET", "/streams/x%2Fstop").error["field"] == "id"
    assert api("POST", "/streams/x%2Fstop").status == 404
    assert api("GET", "/streams/x").body["desired_state"] == "STARTED"


# --- delete ------------------------------------------------------------------------------------


def test_delete_of_a_started_stream_conflicts(api: Api) -> None:
    """A STARTED stream cannot be deleted: 409, and it is still there."""
    create(api)
    result = api("DELETE", "/streams/s1")
    assert (result.status, result.error["code"]) == (409, "conflict")
    assert api("GET", "/streams/s1").status == 200


def test_delete_of_a_held_stream_conflicts(api: Api, store: LeaseStore) -> None:
    """A STOPPED stream whose owner has not released it yet cannot be deleted."""
    create(api)
    store.acquire("s1", "w-1", 20_000)
    api("POST", "/streams/s1/stop")
    result = api("DELETE", "/streams/s1")
    assert result.status == 409
    assert "w-1" in result.error["message"]


def test_delete_of_a_stream_its_session_still_holds_conflicts(api: Api, store: LeaseStore) -> None:
    """A session's lease has no expiry of its own: the answer says the owner is releasing it."""
    create(api)
    store.acquire("s1", "w-1", 20_000, slot=0)
    api("POST", "/streams/s1/stop")
    response = api("DELETE", "/streams/s1")
    assert response.status == 409
    assert "its owner is releasing it" in response.body["error"]["message"]


def test_delete_of_a_stopped_free_stream(api: Api) -> None:
    """A STOPPED, unowned stream is deleted (204) and then gone (404)."""
    create(api)
    api("POST", "/streams/s1/stop")
    result = api("DELETE", "/streams/s1")
    assert (result.status, result.body) == (204, None)
    assert api("GET", "/streams/s1").status == 404


def test_delete_after_the_owner_released(api: Api, store: LeaseStore) -> None:
    """Once the owner has released the stopped stream, it can be deleted."""
    create(api)
    lease = store.acquire("s1", "w-1", 20_000)
    api("POST", "/streams/s1/stop")
    store.release("s1", "w-1", lease.epoch, last_seq=3)
    assert api("DELETE", "/streams/s1").status == 204


def test_delete_with_a_lapsed_lease(api: Api, store: LeaseStore) -> None:
    """A stopped stream whose dead holder's lease lapsed long ago is not held: deletable."""
    create(api)
    store.acquire("s1", "w-dead", 20_000, now_ms=wall_ms() - 120_000)
    api("POST", "/streams/s1/stop")
    assert api("DELETE", "/streams/s1").status == 204


# --- failures of the services ------------------------------------------------------------------


def test_failed_command_send_does_not_fail_the_request(
    aws_settings: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """With the queue unreachable the stream is still created (201); the failure is counted."""
    broken = dataclasses.replace(aws_settings, queue_url=aws_settings.queue_url + "-missing")
    runtime.configure(broken)
    try:
        result = Api()("POST", "/streams", body={"id": "s1", "ws_url": URL})
        assert result.status == 201
        assert Api()("GET", "/streams/s1").body["desired_state"] == DesiredState.STARTED
    finally:
        runtime.configure(type(aws_settings)())
    assert "command send failed" in caplog.messages
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [doc["CommandSendFailures"] for doc in emf if "CommandSendFailures" in doc] == [[1.0]]


def test_store_outage_is_503_with_retry_after(api: Api, moto_server: Any) -> None:
    """When DynamoDB does not answer the API says 503 and when to retry, not 500."""
    moto_server.set_dynamodb_down(True)
    try:
        result = api("GET", "/streams/s1")
    finally:
        moto_server.set_dynamodb_down(False)
    assert (result.status, result.error["code"]) == (503, "unavailable")
    assert "Retry-After" in result.headers
