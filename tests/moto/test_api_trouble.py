"""Trouble made visible by the API: each stream's progress, listings by connection state, and
query parameters no route takes refused instead of ignored."""

from __future__ import annotations

from typing import Any

import pytest
from control_plane_support import Api
from stream_items import put_stream, set_attributes

from lambdas import runtime, stream_listing
from streamlease.indexes import BY_OWNER
from streamlease.lease_store import wall_ms
from streamlease.model import iso_ms
from streamlease.schema import (
    SESSION_HELD_MS,
    TROUBLE_STATES,
    ConnectionState,
    DesiredState,
    StreamAttr,
)

A = StreamAttr


def held(
    control_plane: runtime.Runtime,
    dynamodb: Any,
    stream_id: str,
    connection: ConnectionState | None,
    *,
    state: DesiredState = DesiredState.STARTED,
    expires_ms: int = SESSION_HELD_MS,
    **attributes: Any,
) -> None:
    """A stream held by worker ``w1`` whose holder reported ``connection``."""
    table = control_plane.settings.table_name
    put_stream(dynamodb, table, stream_id, state=state, owner="w1", expires_ms=expires_ms)
    if connection is not None:
        attributes[A.CONNECTION_STATE] = connection.value
    if attributes:
        set_attributes(dynamodb, table, stream_id, attributes)


def ids(result: Any) -> list[str]:
    assert result.status == 200, result.body
    return [s["id"] for s in result.body["streams"]]


def list_all(api: Api, query: dict[str, str]) -> list[list[str]]:
    """The ids of every page of a listing, following next_token to the end."""
    pages: list[list[str]] = []
    token = None
    for _ in range(200):
        result = api("GET", "/streams", query={**query, **({"next_token": token} if token else {})})
        pages.append(ids(result))
        token = result.body["next_token"]
        if token is None:
            return pages
    raise AssertionError("the listing never ended")


# --- progress ----------------------------------------------------------------------------------


def test_get_shows_the_progress_of_the_current_holding(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """Frames received, delivered, malformed, gaps, when they were reported and when the last
    message was received: as the holder wrote them."""
    now = wall_ms()
    held(
        control_plane,
        dynamodb,
        "s1",
        ConnectionState.CONNECTED,
        expires_ms=now + 60_000,
        **{
            A.LEASE_ACQUIRED_AT_MS: now - 60_000,
            A.FRAMES_RECEIVED: 1204,
            A.FRAMES_DELIVERED: 1200,
            A.FRAMES_MALFORMED: 4,
            A.SEQ_GAPS: 1,
            A.LAST_MESSAGE_AT_MS: now - 12_000,
            A.PROGRESS_AT_MS: now - 2_000,
        },
    )
    view = api("GET", "/streams/s1").body
    assert (
        view["frames_received"],
        view["frames_delivered"],
        view["frames_malformed"],
        view["seq_gaps"],
    ) == (1204, 1200, 4, 1)
    assert view["last_message_at"] == iso_ms(now - 12_000)
    assert view["progress_at"] == iso_ms(now - 2_000)
    assert ids(api("GET", "/streams")) == ["s1"]
    assert api("GET", "/streams").body["streams"][0]["frames_delivered"] == 1200


def test_counts_of_an_earlier_holding_are_not_shown_as_this_ones(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """A new holder that has not reported yet shows no counts (the item still has its
    predecessor's), but the last message the stream delivered is still known."""
    now = wall_ms()
    held(
        control_plane,
        dynamodb,
        "s1",
        ConnectionState.CONNECTING,
        expires_ms=now + 60_000,
        **{
            A.LEASE_ACQUIRED_AT_MS: now - 1_000,
            A.FRAMES_RECEIVED: 99,
            A.FRAMES_DELIVERED: 99,
            A.LAST_MESSAGE_AT_MS: now - 30_000,
            A.PROGRESS_AT_MS: now - 25_000,
        },
    )
    view = api("GET", "/streams/s1").body
    assert [view[k] for k in ("frames_received", "frames_delivered", "progress_at")] == [
        None,
        None,
        None,
    ]
    assert view["last_message_at"] == iso_ms(now - 30_000)


def test_a_stream_nobody_reported_on_has_no_progress(api: Api) -> None:
    """A new stream: every progress field is null, none is a made-up zero."""
    api("POST", "/streams", body={"id": "s1", "ws_url": "wss://feed.example.com/x"})
    view = api("GET", "/streams/s1").body
    fields = ("frames_received", "frames_delivered", "frames_malformed", "seq_gaps")
    assert {k: view[k] for k in (*fields, "progress_at", "last_message_at")} == dict.fromkeys(
        (*fields, "progress_at", "last_message_at")
    )


# --- listing by connection state -----------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(TROUBLE_STATES))
def test_list_filters_by_each_trouble_state(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any, state: ConnectionState
) -> None:
    """?connection_state= lists exactly the streams in that state, whatever the others are."""
    for other in ConnectionState:
        held(control_plane, dynamodb, f"x-{other.value}", other)
    held(control_plane, dynamodb, "y-match", state)
    put_stream(dynamodb, control_plane.settings.table_name, "z-free")
    result = api("GET", "/streams", query={"connection_state": state.value})
    assert sorted(ids(result)) == [f"x-{state.value}", "y-match"]
    assert {s["connection_state"] for s in result.body["streams"]} == {state.value}
    assert result.body["next_token"] is None


def test_connection_filter_combines_with_the_desired_state(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """Without state= both partitions are listed, STARTED first; with it, only that one."""
    held(control_plane, dynamodb, "a-started", ConnectionState.RETRYING)
    held(control_plane, dynamodb, "a-connected", ConnectionState.CONNECTED)
    held(
        control_plane,
        dynamodb,
        "b-stopping",
        ConnectionState.RETRYING,
        state=DesiredState.STOPPED,
    )
    query = {"connection_state": "retrying"}
    assert ids(api("GET", "/streams", query=query)) == ["a-started", "b-stopping"]
    stopped = api("GET", "/streams", query={**query, "state": "STOPPED"})
    assert ids(stopped) == ["b-stopping"]


def test_filtered_pages_are_full_although_most_streams_do_not_match(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DynamoDB's Limit counts items read, not matches: pages are still filled to the limit
    (reading on), each match is listed once, and a full last page has no token."""
    monkeypatch.setattr(stream_listing, "FILTER_CHUNK_ITEMS", 4)
    expected = []
    for i in range(24):
        rejected = i % 3 == 0
        held(
            control_plane,
            dynamodb,
            f"s{i:02d}",
            ConnectionState.REJECTED if rejected else ConnectionState.CONNECTED,
        )
        expected += [f"s{i:02d}"] if rejected else []
    pages = list_all(api, {"connection_state": "rejected", "limit": "3"})
    assert [len(p) for p in pages] == [3, 3, 2]
    assert sorted(i for p in pages for i in p) == expected
    pages = list_all(api, {"connection_state": "rejected", "limit": "4"})
    assert [len(p) for p in pages] == [4, 4]


def test_a_page_that_spent_its_reads_is_short_and_goes_on(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One request reads a bounded number of index items: a rare state among many others
    takes several (short, even empty) pages, and every match still shows up exactly once."""
    monkeypatch.setattr(stream_listing, "FILTER_CHUNK_ITEMS", 2)
    monkeypatch.setattr(stream_listing, "FILTER_CHUNKS_PER_PAGE", 2)
    for i in range(12):
        connection = ConnectionState.STALLED if i in (5, 11) else ConnectionState.CONNECTED
        held(control_plane, dynamodb, f"s{i:02d}", connection)
    pages = list_all(api, {"connection_state": "stalled", "limit": "10"})
    assert len(pages) >= 3
    assert sorted(i for p in pages for i in p) == ["s05", "s11"]


def test_streams_sharing_an_index_key_are_each_listed_once(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """Every stream held through a session has the same index key; paging one at a time
    still lists each exactly once (the position carries the stream too)."""
    for i in range(5):
        held(control_plane, dynamodb, f"s{i}", ConnectionState.MALFORMED)
    held(control_plane, dynamodb, "s9", ConnectionState.CONNECTED)
    pages = list_all(api, {"connection_state": "malformed", "limit": "1"})
    assert sorted(i for p in pages for i in p) == [f"s{i}" for i in range(5)]
    assert all(len(p) == 1 for p in pages)


def test_a_stream_that_recovered_meanwhile_is_left_out(
    control_plane: runtime.Runtime, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index may lag: the item read decides, so a stream connected again since is not
    listed as rejected."""
    table = control_plane.settings.table_name
    for name in ("a", "b"):
        held(control_plane, dynamodb, name, ConnectionState.REJECTED)
    original = stream_listing.StreamListing._streams

    def recover_b_first(self: Any, *args: Any) -> Any:
        set_attributes(dynamodb, table, "b", {A.CONNECTION_STATE: "connected"})
        return original(self, *args)

    monkeypatch.setattr(stream_listing.StreamListing, "_streams", recover_b_first)
    page = control_plane.listing.page(None, 10, None, ConnectionState.REJECTED)
    assert [s.stream_id for s in page.streams] == ["a"]


def test_listing_by_connection_state_scans_the_holders_index_never_the_table(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk is a filtered Scan of by-holder, whose small entries spread over the owners'
    partitions (then the matches, and their sessions, are read in batches); no table scan and
    no query of one hot partition."""
    for name, state in (("a", "rejected"), ("b", "connected"), ("c", "rejected")):
        held(control_plane, dynamodb, name, ConnectionState(state))
    calls: list[tuple[str, dict[str, Any]]] = []
    client = control_plane.dynamodb
    for operation in ("query", "scan", "batch_get_item"):
        original = getattr(client, operation)

        def spy(_op: str = operation, _orig: Any = original, **kwargs: Any) -> Any:
            calls.append((_op, kwargs))
            return _orig(**kwargs)

        monkeypatch.setattr(client, operation, spy)
    query = {"connection_state": "rejected", "state": "STARTED"}
    assert ids(api("GET", "/streams", query=query)) == ["a", "c"]
    scans = [kwargs for op, kwargs in calls if op == "scan"]
    assert "query" not in [op for op, _ in calls]
    assert len(scans) == 1
    assert scans[0]["IndexName"] == BY_OWNER.name
    assert "FilterExpression" in scans[0]


def test_a_token_carries_its_connection_filter(
    api: Api, control_plane: runtime.Runtime, dynamodb: Any
) -> None:
    """A page's token works only with the same connection_state: with another one, or none,
    it would page through another listing."""
    for name in ("a", "b", "c"):
        held(control_plane, dynamodb, name, ConnectionState.REJECTED)
    first = api("GET", "/streams", query={"connection_state": "rejected", "limit": "1"})
    token = first.body["next_token"]
    assert token
    for query in ({"connection_state": "stalled"}, {}, {"state": "STARTED"}):
        result = api("GET", "/streams", query={**query, "next_token": token})
        assert (result.status, result.error["field"]) == (400, "next_token"), query
    plain = api("GET", "/streams", query={"limit": "1"}).body["next_token"]
    result = api("GET", "/streams", query={"connection_state": "rejected", "next_token": plain})
    assert (result.status, result.error["field"]) == (400, "next_token")
    follow = {"connection_state": "rejected", "limit": "1", "next_token": token}
    assert ids(api("GET", "/streams", query=follow)) == ["b"]


def test_an_unknown_connection_state_is_400(api: Api) -> None:
    """The filter's value is checked like state's."""
    result = api("GET", "/streams", query={"connection_state": "REJECTED!"})
    assert (result.status, result.error["field"]) == (400, "connection_state")


# --- unknown query parameters ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/streams", None),
        ("GET", "/streams/s1", None),
        ("POST", "/streams", {"id": "s2", "ws_url": "wss://feed.example.com/x"}),
        ("POST", "/streams/s1/stop", None),
        ("POST", "/streams/s1/start", None),
        ("DELETE", "/streams/s1", None),
        ("GET", "/workers", None),
    ],
)
def test_an_unknown_query_parameter_is_400_naming_it(
    api: Api, method: str, path: str, body: Any
) -> None:
    """On every route: a misspelt filter is refused, never ignored (ignored, a listing would
    show every stream) and nothing is changed."""
    api("POST", "/streams", body={"id": "s1", "ws_url": "wss://feed.example.com/x"})
    result = api(method, path, body=body, query={"conection_state": "rejected"})
    assert result.status == 400, result.body
    assert result.error["field"] == "conection_state"
    assert "unknown query parameter" in result.error["message"]
    assert api("GET", "/streams/s1").body["desired_state"] == "STARTED"
    assert api("GET", "/streams/s2").status == 404


def test_the_error_says_what_the_route_takes(api: Api) -> None:
    """The message lists the parameters the route does take."""
    result = api("GET", "/streams", query={"status": "STARTED"})
    assert result.error["message"] == (
        "unknown query parameter 'status'; this route takes: connection_state, limit, "
        "next_token, state"
    )
