"""POST /streams with a connection profile: validated, stored without secret values, shown,
and part of what makes a repeated create the same create."""

from __future__ import annotations

from typing import Any

from control_plane_support import Api

from streamlease.lease_store import LeaseStore

URL = "wss://feed.example.com/v1"
PROFILE: dict[str, Any] = {
    "headers": {"Authorization": "Bearer {secret:streamlease/feed#token}", "X-Client": "ops"},
    "subprotocols": ["feed.v2"],
    "open_message": '{"type":"subscribe","from":{next_seq}}',
    "seq": "data.u",
    "resume": "open_message",
}


def create(api: Api, profile: Any = PROFILE, stream_id: str = "p1") -> Any:
    return api("POST", "/streams", body={"id": stream_id, "ws_url": URL, "profile": profile})


def test_a_profile_is_stored_and_shown_as_given(api: Api, store: LeaseStore) -> None:
    """GET shows the profile with its secret references; the worker reads it from the item."""
    assert create(api).status == 201
    assert api("GET", "/streams/p1").body["profile"] == PROFILE
    assert store.read("p1").profile == PROFILE  # type: ignore[union-attr]


def test_the_same_create_again_is_a_no_op_and_another_profile_a_conflict(api: Api) -> None:
    assert create(api).status == 201
    assert create(api).status == 200
    changed = create(api, {**PROFILE, "seq": "sequence"})
    assert changed.status == 409
    assert changed.error["field"] == "profile"


def test_a_stream_without_a_profile_shows_none_and_no_failover_note(api: Api) -> None:
    assert api("POST", "/streams", body={"id": "plain", "ws_url": URL}).status == 201
    body = api("GET", "/streams/plain").body
    assert (body["profile"], body["failover_note"]) == (None, None)


def test_a_feed_without_sequence_says_what_a_failover_can_cost(api: Api) -> None:
    assert create(api, {"seq": "none", "resume": "none"}).status == 201
    note = api("GET", "/streams/p1").body["failover_note"]
    assert "lose or repeat" in note


def test_a_credential_given_as_a_value_is_refused_and_never_echoed(api: Api) -> None:
    """A literal Authorization value would be stored in the table: refused, naming the field,
    and the value appears nowhere in the answer."""
    refused = create(api, {"headers": {"Authorization": "Bearer s3cr3t-v4lue"}})
    assert refused.status == 400
    assert refused.error["field"] == "profile.headers.Authorization"
    assert "s3cr3t-v4lue" not in str(refused.body)
    assert api("GET", "/streams/p1").status == 404


def test_a_secret_outside_the_deployments_prefix_is_refused(api: Api) -> None:
    refused = create(api, {"headers": {"Authorization": "secret:prod/other"}})
    assert (refused.status, refused.error["field"]) == (400, "profile.headers.Authorization")


def test_a_malformed_profile_is_a_400_naming_the_field(api: Api) -> None:
    wrong_type = create(api, {"subprotocols": "feed"})
    bad_path = create(api, {"seq": "data..u"})
    assert wrong_type.status == 400 and "profile" in (wrong_type.error["field"] or "")
    assert (bad_path.status, bad_path.error["field"]) == (400, "profile.seq")


LOGIN_PROFILE: dict[str, Any] = {
    "open_messages": [
        {
            "send": '{"action":"auth","params":"{secret:streamlease/polygon#key}"}',
            "expect": {"status": "auth_success"},
            "refuse": {"status": "auth_failed"},
        },
        '{"action":"subscribe","after":{last_seq}}',
    ],
    "resume": "open_message",
    "ping": {"send": '{"op":"ping"}', "interval_seconds": 20},
    "control": [{"ev": "status"}],
}


def test_a_login_profile_is_stored_and_shown_with_its_secret_by_reference(api: Api) -> None:
    assert create(api, LOGIN_PROFILE).status == 201
    assert api("GET", "/streams/p1").body["profile"] == LOGIN_PROFILE


def test_a_credential_written_into_an_open_message_is_refused_and_never_echoed(api: Api) -> None:
    refused = create(api, {"open_messages": ['{"action":"auth","params":"PKs3cr3t"}']})
    assert (refused.status, refused.error["field"]) == (400, "profile.open_messages.0")
    assert "PKs3cr3t" not in str(refused.body)
    assert api("GET", "/streams/p1").status == 404


def test_a_change_in_place_keeps_the_checkpoint_and_bumps_the_generation(
    api: Api, store: LeaseStore
) -> None:
    """PATCH replaces the URL and the whole profile; last_seq, epoch and desired state stay;
    the same change again is a no-op (same generation)."""
    assert create(api).status == 201
    lease = store.acquire("p1", "w-1", 20_000)
    store.renew("p1", "w-1", lease.epoch, 41, 20_000)
    before = api("GET", "/streams/p1").body
    new_url = "wss://feed-2.example.com/v1"
    changed = api(
        "PATCH",
        "/streams/p1",
        body={"ws_url": new_url, "profile": {"query": {"after": "{last_seq}"}}},
    )
    assert changed.status == 202
    after = changed.body
    assert (after["ws_url"], after["profile"]) == (new_url, {"query": {"after": "{last_seq}"}})
    assert after["generation"] == before["generation"] + 1
    assert (after["last_seq"], after["epoch"], after["owner"]) == (41, lease.epoch, "w-1")
    again = api("PATCH", "/streams/p1", body={"ws_url": new_url})
    assert (again.status, again.body["generation"]) == (200, after["generation"])
    reset = api("PATCH", "/streams/p1", body={"profile": {}})
    assert (reset.body["profile"], reset.body["generation"]) == (None, after["generation"] + 1)
    assert store.read("p1").ws_url == new_url  # type: ignore[union-attr]


def test_a_change_is_validated_as_a_create_is(api: Api) -> None:
    assert create(api).status == 201
    generation = api("GET", "/streams/p1").body["generation"]
    literal = api(
        "PATCH", "/streams/p1", body={"profile": {"headers": {"Authorization": "Bearer s3cr3t"}}}
    )
    assert (literal.status, literal.error["field"]) == (400, "profile.headers.Authorization")
    assert "s3cr3t" not in str(literal.body)
    bad_url = api("PATCH", "/streams/p1", body={"ws_url": "http://feed.example.com/"})
    assert bad_url.status == 400
    empty = api("PATCH", "/streams/p1", body={})
    assert empty.status == 400
    missing = api("PATCH", "/streams/nope", body={"ws_url": URL})
    assert missing.status == 404
    assert api("GET", "/streams/p1").body["generation"] == generation


def test_a_stream_that_delivered_cannot_switch_between_its_own_and_the_workers_numbering(
    api: Api, store: LeaseStore
) -> None:
    """Its checkpoint counts in one numbering (the upstream's seqs, or the worker's count for
    ``seq: none``): read in the other, the worker would drop the feed's first messages as
    replays and a reader would drop them as repeats. Before the first delivery it may."""
    assert create(api).status == 201
    early = api("PATCH", "/streams/p1", body={"profile": {"seq": "none"}})
    assert early.status == 202
    lease = store.acquire("p1", "w-1", 20_000)
    store.renew("p1", "w-1", lease.epoch, 41, 20_000)
    generation = api("GET", "/streams/p1").body["generation"]
    refused = api("PATCH", "/streams/p1", body={"profile": {"seq": "data.u"}})
    assert (refused.status, refused.error["field"]) == (409, "profile")
    assert "new stream id" in refused.error["message"]
    assert api("GET", "/streams/p1").body["generation"] == generation
    same_kind = api("PATCH", "/streams/p1", body={"profile": {"seq": "none", "idle_seconds": 30}})
    assert same_kind.status == 202
