"""The sequencer: a batch of messages in, sink records out — order, replays dropped, gaps and
undeliverable frames counted with their cause, feeds without a seq numbered."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.frames import BINARY, TEXT, Frame

from streamlease.seqs import NOTHING_DELIVERED
from streamlease.sink_fields import PayloadEncoding
from streamlease.templates import Condition
from worker.stream.progress import explain
from worker.stream.sequence import Sequencer, Undeliverable

NOW = 1_700_000_000_123


def text(payload: bytes | str) -> Frame:
    data = payload.encode() if isinstance(payload, str) else payload
    return Frame(TEXT, bytearray(data))


def frame(seq: Any, **more: Any) -> Frame:
    fields = "".join(f',"{k}":{v}' for k, v in more.items())
    return text(f'{{"seq":{seq}{fields},"data":"x"}}')


def test_a_batch_becomes_records_in_order_with_the_frames_untouched() -> None:
    """Each record: its seq, the batch's receive time, the frame's bytes, JSON encoding."""
    sequencer = Sequencer(("seq",), 0)
    batch = [frame(1), frame(2), frame(3)]
    records = sequencer.take(batch, NOW)
    assert [r.seq for r in records] == [1, 2, 3]
    assert [r.payload for r in records] == [f.data for f in batch]
    assert {r.received_at_ms for r in records} == {NOW}
    assert {r.payload_encoding for r in records} == {PayloadEncoding.JSON}
    assert sequencer.last_seq == 3


def test_seqs_at_or_below_the_last_taken_are_replays_and_dropped() -> None:
    """Within a batch and across batches, and below the checkpoint it started from."""
    sequencer = Sequencer(("seq",), 5)
    assert [r.seq for r in sequencer.take([frame(4), frame(5), frame(6), frame(6)], NOW)] == [6]
    assert [r.seq for r in sequencer.take([frame(6), frame(7)], NOW)] == [7]
    assert sequencer.duplicates == 4


def test_a_jump_is_a_gap_counted_and_the_message_still_delivered() -> None:
    sequencer = Sequencer(("seq",), 0)
    records = sequencer.take([frame(1), frame(2), frame(5), frame(9)], NOW)
    assert [r.seq for r in records] == [1, 2, 5, 9]
    assert (sequencer.gaps, sequencer.missing) == (2, 5)


def test_a_new_stream_whose_feed_starts_at_0_delivers_seq_0() -> None:
    """Nothing delivered is not "delivered up to 0": seq 0 is new, no replay, no gap."""
    sequencer = Sequencer(("seq",), NOTHING_DELIVERED)
    assert [r.seq for r in sequencer.take([frame(0), frame(1)], NOW)] == [0, 1]
    assert (sequencer.duplicates, sequencer.gaps, sequencer.last_seq) == (0, 0, 1)


@pytest.mark.parametrize("first", [1, 7, 1_700_000_000_000])
def test_a_new_stream_counts_no_gap_before_its_first_seq(first: int) -> None:
    """A feed may start anywhere; a gap is a seq missing after one delivered."""
    sequencer = Sequencer(("seq",), NOTHING_DELIVERED)
    assert [r.seq for r in sequencer.take([frame(first), frame(first + 2)], NOW)] == [
        first,
        first + 2,
    ]
    assert (sequencer.gaps, sequencer.missing) == (1, 1)


def test_after_delivering_exactly_seq_0_a_resume_drops_0_and_takes_1() -> None:
    """The checkpoint 0 means "delivered up to 0": 0 is a replay, 1 the next message."""
    sequencer = Sequencer(("seq",), 0)
    assert [r.seq for r in sequencer.take([frame(0), frame(1)], NOW)] == [1]
    assert (sequencer.duplicates, sequencer.gaps) == (1, 0)


def test_a_new_stream_without_seqs_is_numbered_from_0() -> None:
    sequencer = Sequencer(None, NOTHING_DELIVERED)
    assert [r.seq for r in sequencer.take([text("a"), text("b")], NOW)] == [0, 1]
    assert sequencer.last_seq == 1


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        (text("nope"), Undeliverable.NOT_JSON),
        (text("[1, 2]"), Undeliverable.NOT_JSON),
        (text(b"\xff\xfe"), Undeliverable.NOT_JSON),
        (text('{"x": 1}'), Undeliverable.NO_SEQ),
        (frame('"3"'), Undeliverable.SEQ_NOT_INTEGER),
        (frame("true"), Undeliverable.SEQ_NOT_INTEGER),
        (frame("1.5"), Undeliverable.SEQ_NOT_INTEGER),
        (Frame(BINARY, bytearray(b"\x00\x00\x00\x01ab")), Undeliverable.BINARY_NOT_JSON),
    ],
)
def test_an_undeliverable_frame_is_skipped_counted_and_named(
    message: Frame, cause: Undeliverable
) -> None:
    """It is no message: nothing of it reaches the sink, the next frame is delivered."""
    sequencer = Sequencer(("seq",), 0)
    assert [r.seq for r in sequencer.take([message, frame(1)], NOW)] == [1]
    assert (sequencer.malformed, sequencer.undeliverable) == (1, cause)


@pytest.mark.parametrize("loads", ["orjson", "json"])
def test_a_seq_beyond_the_bound_is_malformed_and_never_becomes_last_seq(
    monkeypatch: pytest.MonkeyPatch, loads: str
) -> None:
    """2^63 (one above int64), 2^70 and a 40-digit seq are skipped as malformed, with the cause
    named, whether the JSON parser reads them as integers or as floats; the messages after them
    are delivered (a huge seq taken as last_seq would make every later one a duplicate)."""
    if loads == "json":
        monkeypatch.setattr("worker.stream.sequence._loads", json.loads)
    sequencer = Sequencer(("seq",), 0)
    too_large = [2**63, 2**70, 10**39 + 7]
    batch = [frame(1), *(frame(n) for n in too_large), frame(2)]
    assert [r.seq for r in sequencer.take(batch, NOW)] == [1, 2]
    assert (sequencer.malformed, sequencer.undeliverable) == (3, Undeliverable.SEQ_ABOVE_BOUND)
    assert "above 2^63-1" in explain(Undeliverable.SEQ_ABOVE_BOUND, 3, "seq")
    assert [r.seq for r in sequencer.take([frame(-1), frame(3)], NOW)] == [3]
    assert (sequencer.malformed, sequencer.undeliverable) == (4, Undeliverable.SEQ_NEGATIVE)
    assert sequencer.last_seq == 3


def test_the_largest_seq_accepted_is_2_63_minus_1() -> None:
    sequencer = Sequencer(("seq",), 0)
    assert [r.seq for r in sequencer.take([frame(2**63 - 1)], NOW)] == [2**63 - 1]
    assert sequencer.last_seq == 2**63 - 1


def test_a_binary_frame_holding_json_with_a_seq_is_a_message() -> None:
    """What the frame holds decides, not its opcode (a JSON document either way)."""
    sequencer = Sequencer(("seq",), 0)
    binary = Frame(BINARY, bytearray(b'{"seq":1}'))
    assert [r.payload_encoding for r in sequencer.take([binary], NOW)] == [PayloadEncoding.JSON]


def test_the_seq_is_read_where_the_profile_says() -> None:
    """``data.u``: nested; the document is kept whole; a path through a non-object is no seq."""
    sequencer = Sequencer(("data", "u"), 6)
    batch = [
        text('{"data":{"u":7,"d":"a"}}'),
        text('{"data":"flat"}'),
        text('{"u":8}'),
        text('{"data":{"u":8}}'),
    ]
    assert [r.seq for r in sequencer.take(batch, NOW)] == [7, 8]
    assert (sequencer.malformed, sequencer.undeliverable) == (2, Undeliverable.NO_SEQ)
    assert sequencer.seq_name == "data.u"


def test_without_a_seq_every_frame_is_the_next_message() -> None:
    """``seq: none``: numbered from the checkpoint; text as text, binary as base64; text that is
    not UTF-8 is undeliverable (and takes no number)."""
    sequencer = Sequencer(None, 100)
    batch = [text("hello"), Frame(BINARY, bytearray(b"\x00\xff")), text(b"\xff"), text("{}")]
    records = sequencer.take(batch, NOW)
    assert [(r.seq, r.payload_encoding) for r in records] == [
        (101, PayloadEncoding.TEXT),
        (102, PayloadEncoding.BASE64),
        (103, PayloadEncoding.TEXT),
    ]
    assert (sequencer.malformed, sequencer.undeliverable) == (1, Undeliverable.TEXT_NOT_UTF8)
    assert sequencer.seq_name == "none"


def test_control_frames_are_skipped_and_counted_apart_from_malformed_ones() -> None:
    """A pong, or a heartbeat that even carries a seq, is not data; a frame without a seq that
    matches no condition is still malformed."""
    sequencer = Sequencer(("seq",), 0, (Condition({"op": "pong"}), Condition({"type": "hb"})))
    batch = [
        frame(1),
        text('{"op":"pong"}'),
        text('{"type":"hb","seq":2}'),
        text('{"op":"other"}'),
        frame(2),
    ]
    assert [r.seq for r in sequencer.take(batch, NOW)] == [1, 2]
    assert (sequencer.control, sequencer.malformed, sequencer.gaps) == (2, 1, 0)


def test_a_feed_without_seq_does_not_number_its_control_frames() -> None:
    sequencer = Sequencer(None, 10, (Condition({"event": "heartbeat"}),))
    batch = [text('{"event":"heartbeat"}'), text("hello"), Frame(BINARY, bytearray(b"\x00"))]
    assert [r.seq for r in sequencer.take(batch, NOW)] == [11, 12]
    assert sequencer.control == 1
