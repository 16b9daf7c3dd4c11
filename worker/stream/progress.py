"""One held stream's progress, and the trouble it shows: stalled, malformed, sink failing.

The holder counts into a :class:`ProgressWatch` on its hot path (plain integer attributes, one
update per batch); the worker's connection-state writer (:mod:`worker.stream.connection_report`)
looks at it about once a second (:meth:`ProgressWatch.judge`) and turns what it sees, together with
the connection's own state, into the state an operator reads:

- ``sink_failing``: the sink refused :data:`SINK_FAILING_AFTER` writes in a row;
- ``malformed``: at least :data:`MALFORMED_MIN_FRAMES` frames arrived that could not be
  delivered and nothing was delivered for :data:`MALFORMED_MIN_SECONDS` — ``last_error`` names
  the cause and the command that fixes it (``no `seq` in 120 frames; a feed without one:
  `streamlease set ID --seq-path none`, ...``);
- ``stalled``: connected, and no frame at all for the profile's ``idle_seconds``;
- otherwise the connection's state (connecting, connected, retrying, rejected).

All of it is judged on the writer's observations, so nothing on the hot path reads a clock.
"""

from __future__ import annotations

from typing import Final

from streamlease.lease_store import wall_ms
from streamlease.model import StreamProgress
from streamlease.schema import ConnectionState
from worker.stream.sequence import Sequencer, Undeliverable

SINK_FAILING_AFTER: Final = 3
"""Consecutive refused sink writes that make a stream ``sink_failing``."""
MALFORMED_MIN_FRAMES: Final = 5
MALFORMED_MIN_SECONDS: Final = 3.0
"""A stream is ``malformed`` once this many undeliverable frames came and nothing was delivered
for this long: a feed whose every frame lacks its seq shows within a few seconds, one that
mixes acknowledgements or heartbeats with its messages never does."""

_NO_SEQ_FEED: Final = "a feed without one: `streamlease set ID --seq-path none`"
_SEQ_ELSEWHERE: Final = "the seq at another path: `streamlease set ID --seq-path PATH`"
_EXPLAINED: Final = {
    Undeliverable.NOT_JSON: "{n} frames are not JSON objects; " + _NO_SEQ_FEED,
    Undeliverable.NO_SEQ: "no `{seq}` in {n} frames; " + _NO_SEQ_FEED + ", or " + _SEQ_ELSEWHERE,
    Undeliverable.SEQ_NOT_INTEGER: "`{seq}` is not an integer in {n} frames; " + _SEQ_ELSEWHERE,
    Undeliverable.SEQ_NEGATIVE: "`{seq}` is negative in {n} frames; " + _SEQ_ELSEWHERE,
    Undeliverable.SEQ_ABOVE_BOUND: (
        "`{seq}` is above 2^63-1 in {n} frames; seqs must fit a signed 64-bit integer"
    ),
    Undeliverable.BINARY_NOT_JSON: "{n} binary frames are not JSON; " + _NO_SEQ_FEED,
    Undeliverable.TEXT_NOT_UTF8: "{n} text frames are not UTF-8",
}
"""What ``last_error`` says of each cause, with the command that fixes the profile in place
(the operator reads it beside the stream's id)."""

State = tuple[ConnectionState, str | None]


def explain(cause: Undeliverable, frames: int, seq_name: str) -> str:
    """``last_error`` of a malformed stream: the cause, how many frames, what to check."""
    return _EXPLAINED[cause].format(n=frames, seq=seq_name)


class ProgressWatch:
    """The counters of one holding and what the writer last observed of them."""

    __slots__ = (
        "_delivered_at",
        "_delivered_seen",
        "_malformed_mark",
        "_malformed_note",
        "_received_at",
        "_received_seen",
        "_watching",
        "acked_seq",
        "delivered",
        "idle_seconds",
        "last_message_at_ms",
        "received",
        "received_bytes",
        "sequencer",
        "sink_error",
        "sink_failures",
    )

    def __init__(self, sequencer: Sequencer, idle_seconds: float) -> None:
        self.sequencer = sequencer
        """Counts gaps and undeliverable frames (its counters are part of the progress)."""
        self.idle_seconds = idle_seconds
        self.received = 0
        """Frames received (whole messages, deliverable or not)."""
        self.received_bytes = 0
        """Payload bytes of the messages taken for delivery (what the load meter reads)."""
        self.delivered = 0
        """Messages the sink acknowledged."""
        self.acked_seq: int | None = None
        """The last seq the sink acknowledged in this holding (None: nothing yet)."""
        self.last_message_at_ms: int | None = None
        self.sink_failures = 0
        """Consecutive refused sink writes (0 after any stored batch)."""
        self.sink_error: str | None = None
        self._watching = False
        self._received_seen = 0
        self._received_at = 0.0
        self._delivered_seen = 0
        self._delivered_at = 0.0
        self._malformed_mark = 0
        self._malformed_note: str | None = None

    def snapshot(self) -> StreamProgress:
        """The counters as the stream item carries them, as of now."""
        sequencer = self.sequencer
        return StreamProgress(
            received=self.received,
            delivered=self.delivered,
            malformed=sequencer.malformed,
            gaps=sequencer.gaps,
            control=sequencer.control,
            last_message_at_ms=self.last_message_at_ms,
            at_ms=wall_ms(),
            seq=self.acked_seq,
        )

    def judge(self, now_mono: float, link: State) -> State:
        """The state to show, given the connection's own ``link`` state and error, as seen at
        ``now_mono`` (called by the writer about once a second; see the module docstring)."""
        state, _ = link
        if state is not ConnectionState.CONNECTED:
            self._watching = False
            return link
        sequencer = self.sequencer
        if not self._watching:  # (re)connected: every clock starts now
            self._watching = True
            self._received_seen, self._received_at = self.received, now_mono
            self._delivered_seen, self._delivered_at = self.delivered, now_mono
            self._malformed_mark, self._malformed_note = sequencer.malformed, None
        if self.received != self._received_seen:
            self._received_seen, self._received_at = self.received, now_mono
        if self.delivered != self._delivered_seen:
            self._delivered_seen, self._delivered_at = self.delivered, now_mono
            self._malformed_mark, self._malformed_note = sequencer.malformed, None
        if self.sink_failures >= SINK_FAILING_AFTER:
            return ConnectionState.SINK_FAILING, self.sink_error
        streak = sequencer.malformed - self._malformed_mark
        cause = sequencer.undeliverable
        if (
            cause is not None
            and streak >= MALFORMED_MIN_FRAMES
            and now_mono - self._delivered_at >= MALFORMED_MIN_SECONDS
        ):
            if self._malformed_note is None:  # fixed while it lasts: a repeat is not a change
                self._malformed_note = explain(cause, streak, sequencer.seq_name)
            return ConnectionState.MALFORMED, self._malformed_note
        self._malformed_note = None
        if now_mono - self._received_at >= self.idle_seconds:
            return ConnectionState.STALLED, f"no frame for {self.idle_seconds:g} s"
        return link
