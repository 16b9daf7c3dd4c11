"""Reading lists through the API: paged streams with signed tokens, and the live fleet."""

from __future__ import annotations

import re
from typing import Any

import pytest
from control_plane_support import Api

from streamlease.lease_store import LeaseStore, wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import WorkerState

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


def test_list_does_not_show_worker_items(api: Api, store: LeaseStore) -> None:
    """Worker items share the table but are not streams."""
    create(api)
    store.put_worker(_worker("w-1", wall_ms()))
    assert [s["id"] for s in api("GET", "/streams").body["streams"]] == ["s1"]


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "a.b",
        "",
        "....",
        "eyJrIjp7IlBrIjoiQ09OTiN4In0sInYiOjF9.AAAAAAAAAAAAAAAAAAAAAA",
        "\u00e9\u00e9.\u00e9",
    ],
)
def test_forged_or_broken_token_is_400(api: Api, token: str) -> None:
    """A token the API did not issue is refused naming next_token (never a crash)."""
    create(api)
    result = api("GET", "/streams", query={"next_token": token})
    if token == "":
        assert result.status == 200  # an empty token is no token
    else:
        assert (result.status, result.error["field"]) == (400, "next_token")


def test_tampered_token_is_400(api: Api) -> None:
    """Changing one character of a real token invalidates its signature."""
    for stream_id in ("a", "b", "c"):
        create(api, stream_id)
    token = api("GET", "/streams", query={"limit": "1"}).body["next_token"]
    body, mac = token.split(".")
    flipped = ("B" if body[0] != "B" else "C") + body[1:]
    result = api("GET", "/streams", query={"next_token": f"{flipped}.{mac}"})
    assert (result.status, result.error["field"]) == (400, "next_token")


def test_token_of_another_filter_is_400(api: Api) -> None:
    """A token issued for one state filter is refused under another."""
    for stream_id in ("a", "b", "c"):
        create(api, stream_id)
    token = api("GET", "/streams", query={"limit": "1"}).body["next_token"]
    result = api("GET", "/streams", query={"state": "STARTED", "next_token": token})
    assert (result.status, result.error["field"]) == (400, "next_token")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"state": "RUNNING"}, "state"),
        ({"next_token": "x" * 3000}, "next_token"),
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


def test_workers_lists_live_workers_only(api: Api, store: LeaseStore) -> None:
    """GET /workers shows each live worker's id, host, pid, task, state, counts and age."""
    now = wall_ms()
    store.put_worker(_worker("w-b", now))
    store.put_worker(_worker("w-a", now))
    store.put_worker(_worker("w-dead", now - 60_000))
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
