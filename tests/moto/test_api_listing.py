"""Reading lists through the API: streams paged through the by-state index, and the fleet."""

from __future__ import annotations

import re
from typing import Any

import pytest
from control_plane_support import Api

from lambdas import runtime
from streamlease import dynamo
from streamlease.indexes import BY_STATE
from streamlease.lease_store import LeaseStore, wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import PK, DesiredState, StreamAttr, WorkerState, stream_key
from streamlease.session_store import SessionStore

URL = "wss://feed.example.com/v1/ticker"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def create(api: Api, stream_id: str = "s1", url: str = URL) -> Any:
    return api("POST", "/streams", body={"id": stream_id, "ws_url": url})


# --- list --------------------------------------------------------------------------------------


def test_list_pages_through_every_stream_once(api: Api) -> None:
    """Following next_token with a small limit yields each stream exactly once."""
    ids = [f"s{i}" for i in range(7)]
    for stream_id in ids:
        create(api, stream_id)
    seen: list[str] = []
    token = None
    for _ in range(10):
        query = {"limit": "3", **({"next_token": token} if token else {})}
        page = api("GET", "/streams", query=query)
        assert page.status == 200
        assert len(page.body["streams"]) <= 3
        seen += [s["id"] for s in page.body["streams"]]
        token = page.body["next_token"]
        if token is None:
            break
    assert sorted(seen) == sorted(ids)


def test_list_filters_by_state(api: Api) -> None:
    """state=STOPPED lists only stopped streams, state=STARTED only started ones."""
    for stream_id in ("a", "b", "c"):
        create(api, stream_id)
    api("POST", "/streams/b/stop")
    stopped = api("GET", "/streams", query={"state": "STOPPED"}).body
    started = api("GET", "/streams", query={"state": "STARTED"}).body
    assert [s["id"] for s in stopped["streams"]] == ["b"]
    assert sorted(s["id"] for s in started["streams"]) == ["a", "c"]
    assert stopped["next_token"] is None


def test_list_of_an_empty_table(api: Api) -> None:
    """No streams: an empty list and no token."""
    assert api("GET", "/streams").body == {"streams": [], "next_token": None}


def test_list_does_not_show_worker_items(api: Api, sessions: SessionStore) -> None:
    """Worker items share the table but are not streams."""
    create(api)
    sessions.create(_worker("w-1", wall_ms()))
    assert [s["id"] for s in api("GET", "/streams").body["streams"]] == ["s1"]


def list_all(api: Api, *, limit: int, state: str | None = None) -> list[list[str]]:
    """The ids of every page of a listing, following next_token to the end."""
    pages: list[list[str]] = []
    token = None
    for _ in range(100):
        query = {"limit": str(limit)}
        if state:
            query["state"] = state
        if token:
            query["next_token"] = token
        result = api("GET", "/streams", query=query)
        assert result.status == 200, result.body
        pages.append([s["id"] for s in result.body["streams"]])
        token = result.body["next_token"]
        if token is None:
            return pages
    raise AssertionError("the listing never ended")


def test_paging_never_stops_at_a_worker_item(api: Api, sessions: SessionStore) -> None:
    """3 streams among 9 worker items, one per page: every token is accepted, all 3 listed."""
    now = wall_ms()
    for stream_id in ("a", "b", "c"):
        create(api, stream_id)
    for i in range(9):
        sessions.create(_worker(f"w-{i}", now))
    pages = list_all(api, limit=1)
    assert [i for page in pages for i in page] == ["a", "b", "c"]


def test_unfiltered_listing_is_started_then_stopped_in_id_order(api: Api) -> None:
    """Without a filter: STARTED streams by id, then STOPPED ones by id, pages kept full."""
    for stream_id in ("d", "b", "a", "e", "c"):
        create(api, stream_id)
    api("POST", "/streams/a/stop")
    api("POST", "/streams/d/stop")
    assert list_all(api, limit=2) == [["b", "c"], ["e", "a"], ["d"]]
    assert list_all(api, limit=10) == [["b", "c", "e", "a", "d"]]


def test_filtered_listing_pages_in_id_order(api: Api) -> None:
    """state=STOPPED pages through the stopped streams only, in id order."""
    for i in range(7):
        create(api, f"s{i}")
        if i % 2:
            api("POST", f"/streams/s{i}/stop")
    assert list_all(api, limit=2, state="STOPPED") == [["s1", "s3"], ["s5"]]
    assert list_all(api, limit=3, state="STARTED") == [["s0", "s2", "s4"], ["s6"]]


def test_a_full_last_page_has_no_token(api: Api) -> None:
    """When the filtered streams fill the page exactly, the page says it is the last."""
    for stream_id in ("a", "b"):
        create(api, stream_id)
    page = api("GET", "/streams", query={"state": "STARTED", "limit": "2"}).body
    assert ([s["id"] for s in page["streams"]], page["next_token"]) == (["a", "b"], None)


def test_listing_is_an_index_query_and_a_batch_read_never_a_scan(
    api: Api, control_plane: runtime.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page is one keys-only Query of by-state and one BatchGetItem of those streams."""
    for stream_id in ("a", "b", "c"):
        create(api, stream_id)
    calls: list[tuple[str, dict[str, Any]]] = []
    client = control_plane.dynamodb
    for operation in ("query", "scan", "batch_get_item", "get_item"):
        original = getattr(client, operation)

        def spy(_op: str = operation, _orig: Any = original, **kwargs: Any) -> Any:
            calls.append((_op, kwargs))
            return _orig(**kwargs)

        monkeypatch.setattr(client, operation, spy)
    page = api("GET", "/streams", query={"state": "STARTED", "limit": "2"}).body
    assert [s["id"] for s in page["streams"]] == ["a", "b"]
    assert [op for op, _ in calls] == ["query", "batch_get_item"]
    assert calls[0][1]["IndexName"] == BY_STATE.name
    assert calls[0][1]["Limit"] == 3  # one more key than the page tells whether it goes on


def test_a_stream_that_changed_state_meanwhile_is_not_shown_under_the_old_one(
    control_plane: runtime.Runtime,
) -> None:
    """The batch read sees the item as it is: a stream stopped after the index was read is
    not listed as STARTED."""
    repo = control_plane.repo
    for stream_id in ("a", "b"):
        repo.create(stream_id, URL, "test")
    original = dynamo.batch_get

    def stop_b_first(*args: Any, **kwargs: Any) -> Any:
        repo.set_desired_state("b", DesiredState.STOPPED, "test")
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dynamo, "batch_get", stop_b_first)
        page = control_plane.listing.page(DesiredState.STARTED, 10, None)
    assert [s.stream_id for s in page.streams] == ["a"]


def test_every_writer_of_a_stream_item_sets_stream_id(
    api: Api, store: LeaseStore, control_plane: runtime.Runtime
) -> None:
    """Create, stop, start, acquire and release all leave the item in the by-state index."""
    create(api, "s1")
    lease = store.acquire("s1", "w-1", 20_000)
    store.release("s1", "w-1", lease.epoch)
    api("POST", "/streams/s1/stop")
    api("POST", "/streams/s1/start")
    item = control_plane.dynamodb.get_item(
        TableName=control_plane.settings.table_name, Key={PK: {"S": stream_key("s1")}}
    )["Item"]
    assert item[StreamAttr.STREAM_ID] == {"S": "s1"}
    assert [s["id"] for s in api("GET", "/streams").body["streams"]] == ["s1"]


@pytest.mark.parametrize(
    "token",
    [
        "garbage!",
        "a.b",
        "....",
        "eyJrIjp7IlBrIjoiQ09OTiN4In0sInYiOjF9.AAAAAAAAAAAAAAAAAAAAAA",
        "eyJrIjp7IlBrIjoiV09SS0VSI3cxIn0sInYiOjF9",
        "\u00e9\u00e9.\u00e9",
    ],
)
def test_broken_token_is_400(api: Api, token: str) -> None:
    """A token that is not one the API issues is refused naming next_token (never a crash)."""
    create(api)
    result = api("GET", "/streams", query={"next_token": token})
    assert (result.status, result.error["field"]) == (400, "next_token")


def test_empty_token_is_no_token(api: Api) -> None:
    """next_token= (empty) lists from the start."""
    create(api)
    result = api("GET", "/streams", query={"next_token": ""})
    assert [s["id"] for s in result.body["streams"]] == ["s1"]


def test_token_of_another_filter_is_400(api: Api) -> None:
    """A token issued for the STARTED partition is refused under state=STOPPED."""
    for stream_id in ("a", "b", "c"):
        create(api, stream_id)
    token = api("GET", "/streams", query={"limit": "1"}).body["next_token"]
    result = api("GET", "/streams", query={"state": "STOPPED", "next_token": token})
    assert (result.status, result.error["field"]) == (400, "next_token")
    assert "another state filter" in result.error["message"]


def test_unfiltered_token_works_under_its_own_state_filter(api: Api) -> None:
    """A token only says where a listing is: the same partition's filter may follow it."""
    for stream_id in ("a", "b", "c"):
        create(api, stream_id)
    token = api("GET", "/streams", query={"limit": "1"}).body["next_token"]
    page = api("GET", "/streams", query={"state": "STARTED", "next_token": token}).body
    assert [s["id"] for s in page["streams"]] == ["b", "c"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"state": "RUNNING"}, "state"),
        ({"next_token": "x" * 3000}, "next_token"),
        ({"next_token": "x" * 600}, "next_token"),
    ],
)
def test_bad_list_parameters_are_400(api: Api, query: dict[str, str], field: str) -> None:
    """Out-of-range limits, unknown states and oversized tokens name their parameter."""
    result = api("GET", "/streams", query=query)
    assert (result.status, result.error["field"]) == (400, field)


# --- workers -----------------------------------------------------------------------------------


def _worker(worker_id: str, now_ms: int, *, ttl_ms: int = 20_000) -> WorkerInfo:
    return WorkerInfo(
        worker_id=worker_id,
        state=WorkerState.RUNNING,
        heartbeat_at_ms=now_ms - 1_500,
        expires_at_ms=now_ms + ttl_ms,
        active_streams=4,
        capacity=100,
        host="ip-10-0-1-7",
        pid=4242,
        task_arn="arn:aws:ecs:us-east-1:123456789012:task/streamlease/abc",
        version="1.2.3",
        started_at_ms=now_ms - 60_000,
    )


def test_workers_lists_live_workers_only(api: Api, sessions: SessionStore) -> None:
    """GET /workers shows each live worker's id, host, pid, task, state, counts and age."""
    now = wall_ms()
    sessions.create(_worker("w-b", now))
    sessions.create(_worker("w-a", now))
    sessions.create(_worker("w-dead", now - 60_000))
    body = api("GET", "/workers").body
    assert [w["id"] for w in body["workers"]] == ["w-a", "w-b"]
    worker = body["workers"][0]
    assert worker["host"] == "ip-10-0-1-7"
    assert worker["pid"] == 4242
    assert worker["task_arn"].endswith("task/streamlease/abc")
    assert (worker["state"], worker["stream_count"], worker["capacity"]) == ("RUNNING", 4, 100)
    assert worker["heartbeat_age_ms"] >= 1_500
    assert ISO_MS.match(worker["started_at"])


def test_no_workers(api: Api) -> None:
    """An empty fleet is an empty list."""
    assert api("GET", "/workers").body == {"workers": []}
