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
from streamlease.seqs import NOTHING_DELIVERED

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
    (message,) = profile.open_messages
    assert message.send.render({}, 41) == '{"from":42,"after":41}'


def test_an_exclusive_resume_puts_the_checkpoint_itself_in_any_query_parameter() -> None:
    profile = parse({"query": {"after": "{last_seq}", "channel": "trades"}})
    assert profile.query_for(41, "from_seq") == [("after", "41"), ("channel", "trades")]
    assert profile.to_item() == {"query": {"after": "{last_seq}", "channel": "trades"}}


def test_the_query_shorthand_still_asks_for_the_next_seq() -> None:
    assert parse({}).query_for(41, "from_seq") == [("from_seq", "42")]
    assert parse({"resume_param": "offset"}).query_for(41, "x") == [("offset", "42")]
    assert parse({"resume": "none"}).query_for(41, "from_seq") == []


def test_a_header_carries_the_resume_point() -> None:
    profile = parse({"headers": {"Last-Event-ID": "{last_seq}"}, "resume": "header"})
    assert [(n, v.render({}, 9)) for n, v in profile.headers] == [("Last-Event-ID", "9")]
    assert profile.query_for(9, "from_seq") == []


def test_before_the_first_delivery_the_next_seq_is_0() -> None:
    """The shorthand asks for seq 0; an open message says 0 for {next_seq} and -1 ("after
    nothing") for {last_seq}."""
    assert parse({}).query_for(NOTHING_DELIVERED, "from_seq") == [("from_seq", "0")]
    profile = parse({"open_message": '{"from":{next_seq},"after":{last_seq}}'})
    assert profile.open_messages[0].send.render({}, NOTHING_DELIVERED) == '{"from":0,"after":-1}'


def test_before_the_first_delivery_a_resume_by_last_seq_is_left_out() -> None:
    """A query parameter or header that needs {last_seq} is not sent: the connect states no
    resume point, so the upstream starts from the beginning; the rest is sent as ever."""
    query = parse({"query": {"after": "{last_seq}", "channel": "trades"}})
    assert query.query_for(NOTHING_DELIVERED, "from_seq") == [("channel", "trades")]
    assert query.query_for(0, "from_seq") == [("after", "0"), ("channel", "trades")]
    header = parse(
        {"headers": {"Last-Event-ID": "{last_seq}", "X-From": "{next_seq}"}, "resume": "header"}
    )
    assert header.headers_for({}, NOTHING_DELIVERED) == [("X-From", "0")]
    assert header.headers_for({}, 0) == [("Last-Event-ID", "0"), ("X-From", "1")]


def test_a_login_then_subscribe_sequence_round_trips_and_resolves_its_secrets() -> None:
    data = {
        "open_messages": [
            {
                "send": '{"action":"auth","params":"{secret:streamlease/feed#key}"}',
                "expect": {"status": "auth_success"},
                "refuse": {"status": "auth_failed"},
                "timeout_seconds": 5,
            },
            '{"action":"subscribe","after":{last_seq}}',
        ],
        "resume": "open_message",
        "ping": {"send": '{"op":"ping"}', "interval_seconds": 20},
        "control": [{"op": "pong"}, {"ev": "status"}],
    }
    profile = parse(data)
    assert profile.to_item() == data
    assert Profile.from_item(profile.to_item()) == profile
    assert profile.secrets == (SecretRef("streamlease/feed", "key"),)
    login, subscribe = profile.open_messages
    # JSON-escaped: a quote in the secret cannot change the message.
    assert login.send.render({"streamlease/feed#key": 'k"1'}, 0) == (
        '{"action":"auth","params":"k\\"1"}'
    )
    assert subscribe.send.render({}, 7) == '{"action":"subscribe","after":7}'
    assert login.expect is not None
    assert login.expect.matches([{"ev": "status", "status": "auth_success"}])
    assert not login.expect.matches({"status": "connected"})


@pytest.mark.parametrize(
    "message",
    [
        '{"action":"auth","params":"PKXYZ123"}',
        '{"action":"auth","key":"PKXYZ123","secret":"{secret:streamlease/a}"}',
        '{"type":"hello","api_key":"abc"}',
        '{"op":"login","args":[{"passphrase":"p"}]}',
        "AUTH token=abcdef",
    ],
)
def test_a_literal_credential_in_an_open_message_is_refused(message: str) -> None:
    with pytest.raises(ProfileError, match="credential") as refused:
        parse({"open_messages": [message]})
    assert refused.value.field == "profile.open_messages.0"


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
        ({"resume": "header"}, "profile.headers"),
        ({"resume": "open_message", "open_messages": ["x"]}, "profile.open_messages"),
        ({"open_message": "a", "open_messages": ["b"]}, "profile.open_message"),
        ({"open_messages": ["m"] * 6}, "profile.open_messages"),
        ({"open_messages": [{"send": "m", "refuse": {"a": 1}}]}, "profile.open_messages.0"),
        (
            {"open_messages": [{"send": "m", "expect": {"a": 1}, "timeout_seconds": 0}]},
            "profile.open_messages.0.timeout_seconds",
        ),
        ({"open_messages": [{"send": "m", "expect": {}}]}, "profile.open_messages.0.expect"),
        (
            {"open_messages": [{"send": "m", "expect": {"a": 1.5}}]},
            "profile.open_messages.0.expect",
        ),
        ({"open_messages": ["{secret:other/x}"]}, "profile.open_messages.0"),
        ({"query": {"after": "{last_seq}"}, "resume_param": "x"}, "profile.resume_param"),
        ({"query": {"token": "x"}}, "profile.query.token"),
        ({"query": {"a": "{secret:streamlease/x}"}}, "profile.query.a"),
        ({"query": {"a": "b&c=d"}}, "profile.query.a"),
        ({"seq": "none", "query": {"after": "{last_seq}"}}, "profile.resume"),
        ({"ping": {"send": "p"}}, "profile.ping"),
        ({"ping": {"send": "p", "interval_seconds": 0}}, "profile.ping.interval_seconds"),
        ({"ping": {"send": "{secret:streamlease/x}", "interval_seconds": 5}}, "profile.ping.send"),
        ({"control": []}, "profile.control"),
        ({"control": [{"a": [1]}]}, "profile.control.0"),
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
