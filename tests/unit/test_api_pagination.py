"""Pagination tokens: opaque, unsigned, strictly validated; anything else is TokenInvalid."""

from __future__ import annotations

import base64
import inspect
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambdas import pagination
from lambdas.pagination import (
    MAX_OWNER_CHARS,
    MAX_TOKEN_CHARS,
    TokenInvalid,
    decode_token,
    encode_token,
)
from lambdas.stream_listing import ListPosition
from streamlease.schema import ConnectionState, DesiredState
from streamlease.settings import Settings

STARTED, STOPPED = DesiredState.STARTED, DesiredState.STOPPED
REJECTED, STALLED = ConnectionState.REJECTED, ConnectionState.STALLED


def token_of(data: object, *, pad: bool = False) -> str:
    """A token made by hand from any JSON value, as a client could."""
    raw = base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()
    return raw if pad else raw.rstrip("=")


@pytest.mark.parametrize(
    "position",
    [
        ListPosition(STARTED, "s42"),
        ListPosition(STOPPED, None),
        ListPosition(STOPPED, "A" + "z" * 127),
        ListPosition(STARTED, "a.b_c:d-e"),
    ],
)
def test_round_trip(position: ListPosition) -> None:
    """A token decodes to the position it was made from, under its own filter and none."""
    token = encode_token(position)
    assert decode_token(token, None) == position
    assert decode_token(token, position.state) == position


def test_token_is_url_safe_and_short() -> None:
    """Tokens travel in a query string: base64url without padding, well under the size limit."""
    token = encode_token(ListPosition(STOPPED, "x" * 128))
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert len(token) < MAX_TOKEN_CHARS


def test_token_is_the_versioned_state_and_last_id() -> None:
    """The documented content: version, state partition and the last stream id shown."""
    token = encode_token(ListPosition(STARTED, "s42"))
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded == {"v": 1, "state": "STARTED", "after": "s42"}


def test_a_hand_made_token_of_a_valid_position_is_accepted() -> None:
    """Tokens are not signed: one built by hand for a real position is as good as ours."""
    token = token_of({"after": "s7", "state": "STOPPED", "v": 1})
    assert decode_token(token, STOPPED) == ListPosition(STOPPED, "s7")


def test_token_is_bound_to_its_state_filter() -> None:
    """A token of one state's listing is refused under a filter for the other state."""
    token = encode_token(ListPosition(STARTED, "s1"))
    with pytest.raises(TokenInvalid, match="another state filter"):
        decode_token(token, STOPPED)


@pytest.mark.parametrize(
    "data",
    [
        {"v": 2, "state": "STARTED", "after": "s1"},  # unknown version
        {"v": "1", "state": "STARTED", "after": "s1"},
        {"v": True, "state": "STARTED", "after": "s1"},
        {"v": 1.0, "state": "STARTED", "after": "s1"},
        {"v": 1, "state": "RUNNING", "after": "s1"},  # unknown state
        {"v": 1, "state": "started", "after": "s1"},
        {"v": 1, "state": None, "after": "s1"},
        {"v": 1, "state": "STARTED", "after": ""},  # not a stream id
        {"v": 1, "state": "STARTED", "after": "-s1"},
        {"v": 1, "state": "STARTED", "after": "a/b"},
        {"v": 1, "state": "STARTED", "after": "s1\n"},
        {"v": 1, "state": "STARTED", "after": "x" * 129},
        {"v": 1, "state": "STARTED", "after": 7},
        {"v": 1, "state": "STARTED", "after": "WORKER#w1"},
        {"v": 1, "state": "STARTED"},  # missing field
        {"v": 1, "state": "STARTED", "after": "s1", "k": {"Pk": "WORKER#w1"}},  # extra field
        {"k": {"Pk": "CONN#s1"}, "v": 1, "f": None},  # the old signed format
        ["STARTED", "s1"],
        "STARTED",
        None,
    ],
)
def test_anything_but_a_known_state_and_a_valid_id_is_refused(data: object) -> None:
    """Version, state and id are checked exactly; no other field may ride along."""
    with pytest.raises(TokenInvalid, match="malformed"):
        decode_token(token_of(data), None)


@pytest.mark.parametrize(
    "token",
    [
        "garbage!",
        "a.b",
        "....",
        "\u00e9\u00e9",
        token_of({"after": "s1", "state": "STARTED", "v": 1}, pad=True) + "=",  # padded
        token_of({"after": "s1", "state": "STARTED", "v": 1}) + "\n",
        token_of({"state": "STARTED", "after": "s1", "v": 1}),  # another key order
        token_of({"after": "s1", "state": "STARTED", "v": 1}).replace("", " ", 1),
        base64.urlsafe_b64encode(b"\xff\xfe not utf-8").decode().rstrip("="),
        base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")[:MAX_TOKEN_CHARS],
        "A" * (MAX_TOKEN_CHARS + 4),
    ],
)
def test_other_spellings_and_garbage_are_refused(token: str) -> None:
    """Only the exact text the API issues for a position is a token."""
    with pytest.raises(TokenInvalid, match="malformed"):
        decode_token(token, None)


def test_no_signing_key_setting_remains() -> None:
    """Tokens carry no signature, so there is no key to configure (or to forget to)."""
    assert not hasattr(Settings(), "next_token_key")
    assert "hmac" not in inspect.getsource(pagination)


@pytest.mark.parametrize(
    "position",
    [
        ListPosition(STARTED, "s42", REJECTED, "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12"),
        ListPosition(STARTED, "s42", STALLED, "w1"),
        ListPosition(STOPPED, None, REJECTED, None),
        ListPosition(STOPPED, "x" * 128, ConnectionState.SINK_FAILING, "h" * MAX_OWNER_CHARS),
    ],
)
def test_a_connection_listing_round_trips_under_its_filter(position: ListPosition) -> None:
    """A token of a listing by connection state carries that state and the index position
    (the stream's holder: by-holder's key)."""
    token = encode_token(position)
    assert len(token) < MAX_TOKEN_CHARS
    assert decode_token(token, None, position.connection_state) == position
    assert decode_token(token, position.state, position.connection_state) == position


def test_a_connection_token_is_bound_to_its_connection_filter() -> None:
    """Refused under another connection state, and without one; a plain token is refused
    under a connection filter."""
    token = encode_token(ListPosition(STARTED, "s1", REJECTED, "w1"))
    for connection in (STALLED, None):
        with pytest.raises(TokenInvalid, match="another connection_state filter"):
            decode_token(token, None, connection)
    with pytest.raises(TokenInvalid, match="another connection_state filter"):
        decode_token(encode_token(ListPosition(STARTED, "s1")), None, REJECTED)


@pytest.mark.parametrize(
    "data",
    [
        {"after": "s1", "connection_state": "rejected", "owner": None, "state": "STARTED"},
        {"after": None, "connection_state": "rejected", "owner": "w1", "state": "STARTED"},
        {"after": "s1", "connection_state": "rejected", "owner": "", "state": "STARTED"},
        {"after": "s1", "connection_state": "rejected", "owner": "w 1", "state": "STARTED"},
        {"after": "s1", "connection_state": "rejected", "owner": "w\n1", "state": "STARTED"},
        {"after": "s1", "connection_state": "rejected", "owner": "w" * 201, "state": "STARTED"},
        {"after": "s1", "connection_state": "rejected", "owner": 5, "state": "STARTED"},
        {"after": "s1", "connection_state": "REJECTED", "owner": "w1", "state": "STARTED"},
        {"after": "s1", "connection_state": None, "owner": "w1", "state": "STARTED"},
        {"after": "s1", "connection_state": "rejected", "state": "STARTED"},
        {"after": "s1", "owner": "w1", "state": "STARTED"},
    ],
)
def test_a_connection_token_is_checked_as_strictly(data: dict[str, object]) -> None:
    """The connection state must be one, the owner an index key value with its stream."""
    with pytest.raises(TokenInvalid, match="malformed"):
        decode_token(token_of({**data, "v": 2}), None, REJECTED)


def test_a_connection_token_of_the_previous_release_is_refused() -> None:
    """Version 1 carried a position in by-state-expiry, which is gone: a 400, never a query
    of the wrong index (the listing is simply started again)."""
    old = {"after": "s1", "connection_state": "rejected", "expiry": 5, "state": "STARTED", "v": 1}
    with pytest.raises(TokenInvalid, match="malformed"):
        decode_token(token_of(old), None, REJECTED)


@given(st.text(max_size=600))
def test_arbitrary_text_never_crashes(text: str) -> None:
    """Whatever a client sends, decoding raises TokenInvalid or returns a valid position."""
    try:
        position = decode_token(text, None)
    except TokenInvalid:
        return
    assert encode_token(position) == text
