"""The simulator's feed modes without sockets: message layouts, subscriptions, knob checks."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from local.upstream_sim import (
    Knobs,
    binary_payload_for,
    payload_for,
    payload_path,
    subscription_start,
    text_message,
)


def test_default_text_message_is_seq_ts_data() -> None:
    """The default layout, in this key order, compact."""
    assert text_message("a:b", 3, 99) == b'{"seq":3,"ts":99,"data":"%s"}' % (
        payload_for("a:b", 3).encode()
    )


@pytest.mark.parametrize(
    ("seq_field", "expected"),
    [
        ("sequence", lambda p: {"sequence": 5, "ts": 1, "data": p}),
        ("u", lambda p: {"u": 5, "ts": 1, "data": p}),
        ("meta.seq", lambda p: {"meta": {"seq": 5}, "ts": 1, "data": p}),
        ("data.u", lambda p: {"data": {"u": 5, "d": p}, "ts": 1}),
        ("data.x.y", lambda p: {"data": {"x": {"y": 5}, "d": p}, "ts": 1}),
    ],
)
def test_seq_field_places_the_seq_and_the_payload_at_payload_path(
    seq_field: str, expected: Callable[[str], dict[str, object]]
) -> None:
    """The seq is at seq_field; the payload at payload_path(seq_field); nothing else moves."""
    body = json.loads(text_message("s", 5, 1, seq_field=seq_field))
    payload = payload_for("s", 5)
    assert body == expected(payload)
    node = body
    for key in payload_path(seq_field).split("."):
        node = node[key]
    assert node == payload


def test_noseq_message_has_ts_and_data_only() -> None:
    """noseq: no seq anywhere, data is still payload_for(stream, n)."""
    assert json.loads(text_message("s", 8, 1, noseq=True)) == {"ts": 1, "data": payload_for("s", 8)}


def test_binary_payload_is_seq_marker_and_utf8_payload() -> None:
    """8-byte big-endian seq, b"\\xff\\xfe", then the UTF-8 of payload_for; deterministic."""
    frame = binary_payload_for("ä", 258)
    assert frame == b"\x00" * 6 + b"\x01\x02" + b"\xff\xfe" + payload_for("ä", 258).encode()
    assert frame == binary_payload_for("ä", 258)
    with pytest.raises(UnicodeDecodeError):
        frame.decode()


@pytest.mark.parametrize(
    ("message", "start"),
    [
        ('{"type": "subscribe"}', 4),
        ('{"type": "subscribe", "from": 9, "channels": ["x"]}', 9),
        ('{"type": "subscribe", "from": 1}', 1),
        ('{"type": "subscribe", "from": 0}', 0),
        ('{"type": "subscribe", "from": -1}', None),
        ('{"type": "subscribe", "after": -1}', 0),
        ('{"type": "subscribe", "after": -2}', None),
        ('{"type": "subscribe", "from": "9"}', None),
        ('{"type": "subscribe", "from": 9.0}', None),
        ('{"type": "subscribe", "from": true}', None),
        ('{"type": "unsubscribe"}', None),
        ('[{"type": "subscribe"}]', None),
        ("subscribe", None),
        (b'{"type": "subscribe"}', None),
    ],
)
def test_subscription_start(message: str | bytes, start: int | None) -> None:
    """Only a text JSON object of type subscribe subscribes; "from" must be an integer >= 0,
    "after" one >= -1 (after nothing: from 0)."""
    assert subscription_start(message, default=4) == start


def test_modes_parse_from_the_query() -> None:
    """Flags are 0/1, texts are taken as given."""
    knobs = Knobs.from_query(
        "bearer=t&subprotocol=p.v1&subscribe=1&ack=1&seq_field=data.u&noseq=0&binary=0",
        "from_seq",
        10.0,
    )
    assert (knobs.bearer, knobs.subprotocol, knobs.seq_field) == ("t", "p.v1", "data.u")
    assert (knobs.subscribe, knobs.ack, knobs.noseq, knobs.binary) == (True, True, False, False)


@pytest.mark.parametrize(
    ("query", "first", "start"),
    [
        ("", 1, 1),
        ("first_seq=0", 0, 0),
        ("first_seq=0&from_seq=5", 0, 5),
        ("from_seq=0", 1, 0),
        ("first_seq=0&after=-1", 0, 0),
    ],
)
def test_a_feed_begins_at_first_seq_and_a_connection_asks_from_seq(
    query: str, first: int, start: int
) -> None:
    """A feed may begin at 0; asking for nothing is asking for its beginning; asking for seq
    0 is allowed (a client that delivered nothing yet)."""
    knobs = Knobs.from_query(query, "from_seq", 10.0)
    assert (knobs.first_seq, knobs.from_seq) == (first, start)


def test_the_bearer_token_stays_out_of_the_knobs_repr() -> None:
    """A Knobs printed anywhere does not show the token."""
    assert "s3cr3t" not in repr(Knobs(bearer="s3cr3t"))


@pytest.mark.parametrize(
    "query",
    [
        "subscribe=yes",
        "binary=true",
        "noseq=",
        "ack=1",
        "seq_field=",
        "seq_field=ts",
        "seq_field=ts.x",
        "seq_field=data",
        "seq_field=data.d",
        "seq_field=data.d.x",
        "seq_field=a..b",
        "seq_field=a%20b",
        "noseq=1&seq_field=u",
        "binary=1&noseq=1",
        "binary=1&seq_field=u",
        "bearer=",
        "bearer=a%20b",
        "subprotocol=",
        "subprotocol=a,b",
        "rate=nan",
        "from_seq=-1",
        "first_seq=-1",
        "after=-2",
    ],
)
def test_bad_mode_values_are_refused(query: str) -> None:
    """A value that does not parse or modes that do not combine raise ValueError."""
    with pytest.raises(ValueError):
        Knobs.from_query(query, "from_seq", 10.0)


def test_a_programmatic_flag_must_be_a_bool() -> None:
    """set_fault(subscribe="1") is refused like a bad query value."""
    with pytest.raises(ValueError):
        Knobs(subscribe="1").validate()
