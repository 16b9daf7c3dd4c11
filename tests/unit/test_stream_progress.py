"""The trouble a stream's progress shows, as the connection-state writer judges it about once a
second: stalled, malformed (with an error that says what to check), sink failing — and the
connection's own state otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

from websockets.frames import BINARY, TEXT, Frame

from streamlease.schema import ConnectionState
from worker.stream.progress import (
    MALFORMED_MIN_FRAMES,
    MALFORMED_MIN_SECONDS,
    SINK_FAILING_AFTER,
    ProgressWatch,
    explain,
)
from worker.stream.sequence import Sequencer, Undeliverable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
from named_commands import command_problem, named_commands

CONNECTED = (ConnectionState.CONNECTED, None)
RETRYING = (ConnectionState.RETRYING, "upstream refused the TCP connection")


def progress(seq_path: tuple[str, ...] | None = ("seq",), idle: float = 10.0) -> ProgressWatch:
    return ProgressWatch(Sequencer(seq_path, 0), idle)


def receive(p: ProgressWatch, *payloads: str) -> None:
    """What the holder does with a batch: count it, sequence it; deliver what came out."""
    batch = [Frame(TEXT, bytearray(x.encode())) for x in payloads]
    p.received += len(batch)
    records = p.sequencer.take(batch, 0)
    p.delivered += len(records)


def test_a_connection_not_connected_shows_its_own_state() -> None:
    p = progress()
    assert p.judge(0.0, RETRYING) == RETRYING


def test_a_connected_stream_that_gets_nothing_for_its_idle_time_is_stalled() -> None:
    """Counted from the connect (or the last frame), not from the holding's start."""
    p = progress(idle=10.0)
    assert p.judge(100.0, CONNECTED) == CONNECTED
    receive(p, '{"seq":1}')
    assert p.judge(105.0, CONNECTED) == CONNECTED
    assert p.judge(114.0, CONNECTED) == CONNECTED
    state, error = p.judge(115.0, CONNECTED)
    assert state is ConnectionState.STALLED and error == "no frame for 10 s"
    receive(p, '{"seq":2}')
    assert p.judge(116.0, CONNECTED) == CONNECTED
    assert p.judge(117.0, RETRYING) == RETRYING
    assert p.judge(120.0, CONNECTED) == CONNECTED  # reconnected: the idle clock starts again


def test_frames_without_a_seq_make_a_malformed_stream_that_says_what_to_check() -> None:
    """Every frame undeliverable: malformed within a few seconds, and the error names the
    cause, how many frames, and the profile setting to look at."""
    p = progress()
    p.judge(0.0, CONNECTED)
    for second in range(1, 4):
        receive(p, *['{"ts": 1, "data": "x"}'] * 10)
        shown = p.judge(float(second), CONNECTED)
    assert MALFORMED_MIN_SECONDS <= 3.0 and MALFORMED_MIN_FRAMES <= 30
    assert shown == (
        ConnectionState.MALFORMED,
        "no `seq` in 30 frames; a feed without one: `streamlease set ID --seq-path none`, or "
        "the seq at another path: `streamlease set ID --seq-path PATH`",
    )
    receive(p, *['{"ts": 1}'] * 10)
    assert p.judge(4.0, CONNECTED) == shown  # the same text while it lasts: no rewrite


def test_a_feed_that_mixes_acknowledgements_with_its_messages_is_not_malformed() -> None:
    """A frame without a seq now and then (a subscription ack, a heartbeat) is counted, but
    the stream delivers, so it is connected."""
    p = progress()
    p.judge(0.0, CONNECTED)
    for second in range(1, 10):
        receive(p, '{"type":"heartbeat"}', f'{{"seq":{second}}}')
        assert p.judge(float(second), CONNECTED) == CONNECTED
    assert p.sequencer.malformed == 9


def test_delivery_ends_a_malformed_stream() -> None:
    p = progress()
    p.judge(0.0, CONNECTED)
    receive(p, *["nope"] * 10)
    assert p.judge(5.0, CONNECTED)[0] is ConnectionState.MALFORMED
    receive(p, '{"seq":1}')
    assert p.judge(6.0, CONNECTED) == CONNECTED


def test_binary_frames_on_a_feed_read_as_json_name_the_setting() -> None:
    p = progress()
    p.judge(0.0, CONNECTED)
    p.received += 8
    p.sequencer.take([Frame(BINARY, bytearray(b"\x00\x01"))] * 8, 0)
    state, error = p.judge(4.0, CONNECTED)
    assert state is ConnectionState.MALFORMED
    assert error == (
        "8 binary frames are not JSON; a feed without one: `streamlease set ID --seq-path none`"
    )


def test_a_sink_that_keeps_refusing_shows_as_sink_failing() -> None:
    p = progress()
    p.judge(0.0, CONNECTED)
    p.sink_failures, p.sink_error = SINK_FAILING_AFTER, "sink refused 3 writes (SinkError: x)"
    assert p.judge(1.0, CONNECTED) == (ConnectionState.SINK_FAILING, p.sink_error)
    p.sink_failures = 0
    assert p.judge(2.0, CONNECTED) == CONNECTED


def test_the_snapshot_is_what_the_item_carries() -> None:
    p = progress()
    receive(p, '{"seq":1}', '{"seq":3}', "junk")
    p.last_message_at_ms = 123
    snapshot = p.snapshot()
    assert (snapshot.received, snapshot.delivered) == (3, 2)
    assert (snapshot.malformed, snapshot.gaps) == (1, 1)
    assert snapshot.last_message_at_ms == 123


def test_every_explanation_names_a_command_the_cli_has() -> None:
    """What ``last_error`` tells an operator to run is a command the CLI takes as written."""
    texts = [explain(cause, 5, "data.u") for cause in Undeliverable]
    named = [command for text in texts for command in named_commands(text)]
    assert len(named) >= 5
    assert [p for c in named if (p := command_problem(c)) is not None] == []
