"""Connection profiles: what a stream may say about its upstream, and what it may not."""

from __future__ import annotations

import pytest

from streamlease.profile import (
    DEFAULT_PROFILE,
    Profile,
    ProfileError,
    SecretRef,
    parse_profile,
)

PREFIX = "streamlease/"


def parse(data: dict[str, object]) -> Profile:
    return parse_profile(data, secrets_prefix=PREFIX)


def test_no_profile_is_the_default_and_stores_nothing() -> None:
    assert parse({}) == DEFAULT_PROFILE
    assert DEFAULT_PROFILE.to_item() == {}
    assert Profile.from_item(None) is DEFAULT_PROFILE
    assert DEFAULT_PROFILE.seq_path == ("seq",)


def test_a_market_data_profile_round_trips_through_the_item() -> None:
    data = {
        "headers": {"Authorization": "Bearer {secret:streamlease/feed#token}", "X-Client": "a"},
        "subprotocols": ["v2.feed"],
        "open_message": '{"type":"subscribe","from":{next_seq}}',
        "seq": "data.u",
        "resume": "open_message",
    }
    profile = parse(data)
    assert profile.seq_path == ("data", "u")
    assert profile.secrets == (SecretRef("streamlease/feed", "token"),)
    assert profile.to_item() == data
    assert Profile.from_item(profile.to_item()) == profile


def test_the_open_message_places_the_resume_point() -> None:
    profile = parse({"open_message": '{"from":{next_seq},"after":{last_seq}}'})
    assert profile.open_message_for(41) == '{"from":42,"after":41}'


def test_secrets_are_rendered_into_header_values() -> None:
    profile = parse(
        {"headers": {"Authorization": "secret:streamlease/a", "X-Sig": "v1={secret:streamlease/b}"}}
    )
    resolved = {"streamlease/a": "Bearer t0k", "streamlease/b": "abc"}
    assert [(n, v.render(resolved)) for n, v in profile.headers] == [
        ("Authorization", "Bearer t0k"),
        ("X-Sig", "v1=abc"),
    ]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"headers": {"Authorization": "Bearer s3cr3t"}}, "profile.headers.Authorization"),
        ({"headers": {"X-Api-Token": "s3cr3t"}}, "profile.headers.X-Api-Token"),
        ({"headers": {"Cookie": "session=1"}}, "profile.headers.Cookie"),
        ({"headers": {"Authorization": "secret:other/x"}}, "profile.headers.Authorization"),
        ({"headers": {"Host": "evil.example"}}, "profile.headers.Host"),
        ({"headers": {"Sec-WebSocket-Protocol": "x"}}, "profile.headers.Sec-WebSocket-Protocol"),
        ({"headers": {"X-A": "a\r\nInjected: 1"}}, "profile.headers.X-A"),
        ({"headers": {"bad name": "x"}}, "profile.headers"),
        ({"headers": {f"X-{n}": "v" for n in range(21)}}, "profile.headers"),
        ({"subprotocols": ["ok", "no spaces"]}, "profile.subprotocols"),
        ({"subprotocols": ["a", "a"]}, "profile.subprotocols"),
        ({"seq": "data..u"}, "profile.seq"),
        ({"seq": "a.b.c.d.e.f.g.h.i"}, "profile.seq"),
        ({"seq": 5}, "profile.seq"),
        ({"resume": "magic"}, "profile.resume"),
        ({"resume": "open_message", "open_message": "no resume point"}, "profile.open_message"),
        ({"resume": "open_message"}, "profile.open_message"),
        ({"seq": "none", "resume": "query"}, "profile.resume"),
        ({"resume": "none", "resume_param": "from"}, "profile.resume_param"),
        ({"open_message": "x" * 5000}, "profile.open_message"),
        ({"colour": "blue"}, "profile.colour"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ProfileError) as refused:
        parse(data)
    assert refused.value.field == field


def test_a_deployment_without_a_secrets_prefix_allows_no_secrets() -> None:
    with pytest.raises(ProfileError, match="not enabled"):
        parse_profile({"headers": {"Authorization": "secret:x"}}, secrets_prefix="")


def test_a_secret_arn_is_checked_by_its_name() -> None:
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:streamlease/feed-AbCdEf"
    profile = parse({"headers": {"Authorization": f"secret:{arn}"}})
    assert profile.secrets[0].secret_name() == "streamlease/feed-AbCdEf"


def test_a_feed_without_sequence_resumes_nowhere() -> None:
    """``seq: none`` alone is enough: resume defaults to none there (and is stored so)."""
    for given in ({"seq": "none", "resume": "none"}, {"seq": "none"}):
        profile = parse(given)
        assert profile.seq_path is None
        assert profile.to_item() == {"seq": "none", "resume": "none"}
