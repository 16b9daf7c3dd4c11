"""Pure pieces of the API: error descriptions, the precheck, path decoding, identity, views."""

from __future__ import annotations

import json

import pytest

from lambdas.api import with_plain_path
from lambdas.api_models import StreamView
from lambdas.http_errors import describe_validation_errors, precheck
from lambdas.identity import caller_identity
from streamlease.model import Stream
from streamlease.schema import STREAM_ID_PATTERN, DesiredState
from streamlease.url_policy import URL_PATTERN


def test_unknown_field_is_named() -> None:
    """An extra field is reported under its own name."""
    field, message = describe_validation_errors(
        [{"type": "extra_forbidden", "loc": ("body", "owner"), "msg": "Extra inputs"}]
    )
    assert (field, message) == ("owner", "owner: unknown field")


def test_first_field_wins_and_count_is_bounded() -> None:
    """The first error names the field; at most three messages, then a count."""
    errors = [{"type": "missing", "loc": ("body", f"f{i}"), "msg": "x"} for i in range(5)]
    field, message = describe_validation_errors(errors)
    assert field == "f0"
    assert message.endswith("and 2 more")


def test_a_pattern_is_said_in_words_never_as_a_regex() -> None:
    """The stream-id and URL rules are spelled out; the regular expression is not shown."""
    for pattern, field, words in (
        (STREAM_ID_PATTERN, "id", "1 to 128 characters"),
        (URL_PATTERN, "ws_url", "wss:// URL"),
    ):
        error = {
            "type": "string_pattern_mismatch",
            "loc": ("body", field),
            "msg": f"String should match pattern '{pattern}'",
            "ctx": {"pattern": pattern},
        }
        named, message = describe_validation_errors([error])
        assert named == field
        assert message.startswith(f"{field}: must be ") and words in message
        assert pattern not in message and "^" not in message and "[" not in message


def test_an_unknown_pattern_is_not_shown_either() -> None:
    """A pattern without words still never leaks into the message."""
    error = {"type": "string_pattern_mismatch", "loc": ("query", "x"), "ctx": {"pattern": "^a$"}}
    assert describe_validation_errors([error]) == ("x", "x: has the wrong form")


def test_long_field_names_are_cut() -> None:
    """A client-chosen key is not echoed at full length."""
    field, _ = describe_validation_errors(
        [{"type": "extra_forbidden", "loc": ("body", "k" * 500), "msg": ""}]
    )
    assert field is not None and len(field) < 80


@pytest.mark.parametrize(
    ("event", "status"),
    [
        ({"httpMethod": "POST", "body": None}, None),
        ({"httpMethod": "POST", "body": "{}"}, None),
        ({"httpMethod": "GET", "body": "not json"}, None),
        ({"httpMethod": "POST", "body": "x" * 9000}, 413),
        ({"httpMethod": "POST", "body": "{", "headers": None}, 400),
        ({"httpMethod": "POST", "body": "{}", "headers": {"content-type": "text/xml"}}, 415),
        ({"httpMethod": "POST", "body": "e30=", "isBase64Encoded": True}, None),
        ({"httpMethod": "POST", "body": "!!", "isBase64Encoded": True}, 400),
        ({"httpMethod": "POST", "body": 42}, 400),
    ],
)
def test_precheck(event: dict[str, object], status: int | None) -> None:
    """Size, media type and JSON syntax are checked before routing."""
    refused = precheck(event, 8192)
    if status is None:
        assert refused is None
    else:
        assert refused is not None and refused["statusCode"] == status
        assert json.loads(refused["body"])["error"]["field"] == "body"


@pytest.mark.parametrize(
    ("path", "plain"),
    [
        ("/streams/a%3Ab", "/streams/a:b"),
        ("/streams/a%3ab/stop", "/streams/a:b/stop"),
        ("/streams/a%2Fstop", "/streams/a%2Fstop"),
        ("/streams/a%3Fx", "/streams/a%3Fx"),
        ("/streams/a%zz", "/streams/a%zz"),
        ("/streams/%41", "/streams/A"),
    ],
)
def test_with_plain_path(path: str, plain: str) -> None:
    """Only escapes of stream-id characters are decoded; '/', '?' and junk stay escaped."""
    assert with_plain_path({"path": path})["path"] == plain


@pytest.mark.parametrize(
    ("context", "who"),
    [
        (
            {"identity": {"userArn": "arn:aws:iam::1:user/a", "caller": "C"}},
            "arn:aws:iam::1:user/a",
        ),
        ({"identity": {"userArn": None, "caller": "AIDA:x"}}, "AIDA:x"),
        ({"identity": {"userArn": "  "}}, "anonymous"),
        ({"identity": None}, "anonymous"),
        (None, "anonymous"),
        ("junk", "anonymous"),
    ],
)
def test_caller_identity(context: object, who: str) -> None:
    """The IAM user ARN, else the caller id, else anonymous."""
    assert caller_identity({"requestContext": context}) == who


def stream(**changes: object) -> Stream:
    base: dict[str, object] = {
        "stream_id": "s1",
        "desired_state": DesiredState.STARTED,
        "ws_url": "wss://x.example.com/",
        "owner": "w1",
        "expires_at_ms": 10_000,
        "last_seq": 5,
        "epoch": 2,
        "generation": 1,
        "acquired_at_ms": 1_000,
    }
    base.update(changes)
    return Stream(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "now", "state", "remaining", "since"),
    [
        ({}, 4_000, "held", 6_000, "1970-01-01T00:00:01.000Z"),
        ({}, 10_000, "expired", 0, "1970-01-01T00:00:01.000Z"),
        ({"owner": None, "expires_at_ms": 0}, 4_000, "free", 0, None),
    ],
)
def test_stream_view_lease(
    changes: dict[str, object], now: int, state: str, remaining: int, since: str | None
) -> None:
    """The view says whether the lease is held, expired or free, and for how much longer."""
    view = StreamView.of(stream(**changes), now, lease_ms=5_000)
    assert (view.lease_state, view.lease_remaining_ms, view.owned_since) == (
        state,
        remaining,
        since,
    )


def test_a_per_stream_leases_seq_is_read_at_its_last_renewal() -> None:
    """A per-stream lease's item carries the seq its last renewal wrote, sent at the expiry
    less the lease: that is how old ``last_seq`` is."""
    view = StreamView.of(stream(), 4_000, lease_ms=5_000)
    assert (view.last_seq, view.last_seq_at) == (5, "1970-01-01T00:00:05.000Z")
