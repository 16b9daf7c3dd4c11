"""A held stream's delivered seq and rate, from its last renewal and its holder's last
progress report (no write of their own): which reading counts, how old it is, and when two
readings give no rate."""

from __future__ import annotations

from streamlease import checkpoints
from streamlease.checkpoints import Checkpoint
from streamlease.live_progress import MIN_RATE_WINDOW_MS, live_progress
from streamlease.model import Stream, StreamProgress, WorkerInfo
from streamlease.schema import SESSION_HELD_MS, DesiredState, WorkerState
from streamlease.seqs import NOTHING_DELIVERED

LEASE_MS = 20_000
ACQUIRED_MS = 1_796_000_000_000
EPOCH = 4
SLOT = 2


def report(seq: int | None, at_ms: int) -> StreamProgress:
    """A progress write of the current holding: 30 frames counted, ``seq`` acknowledged."""
    return StreamProgress(30, 30, 0, 0, at_ms - 100, at_ms, seq=seq)


def session_stream(progress: StreamProgress | None = None, last_seq: int = 100) -> Stream:
    """A stream attached to the session ``w/1-ab`` in slot :data:`SLOT`."""
    return Stream(
        "s1",
        DesiredState.STARTED,
        "wss://feed.example.com/s1",
        "w/1-ab",
        SESSION_HELD_MS,
        last_seq,
        EPOCH,
        1,
        acquired_at_ms=ACQUIRED_MS,
        slot=SLOT,
        progress=progress,
    )


def session(seq: int | None, heartbeat_at_ms: int, epoch: int = EPOCH) -> WorkerInfo:
    """The owner's worker item whose vector holds ``seq`` for s1 at ``epoch`` in its slot."""
    entries: list[Checkpoint | None] = [None] * (SLOT + 1)
    if seq is not None:
        entries[SLOT] = Checkpoint(epoch, seq, checkpoints.stream_tag("s1"))
    return WorkerInfo(
        "w/1-ab",
        WorkerState.RUNNING,
        heartbeat_at_ms,
        heartbeat_at_ms + LEASE_MS,
        1,
        10,
        "w",
        1,
        checkpoints=checkpoints.encode(entries),
    )


def test_the_seq_is_the_last_renewals_and_says_when_it_was_sent() -> None:
    """The session's vector is newer than the stream item's checkpoint and its report."""
    renewed = ACQUIRED_MS + 15_000
    live = live_progress(
        session_stream(report(150, ACQUIRED_MS + 5_000)), session(400, renewed), LEASE_MS
    )
    assert (live.seq, live.seq_at_ms) == (400, renewed)


def test_the_rate_runs_from_the_last_report_to_the_last_renewal() -> None:
    """20 seqs a second between the report (seq 150 at +5 s) and the renewal (seq 350 at +15 s)."""
    stream = session_stream(report(150, ACQUIRED_MS + 5_000))
    live = live_progress(stream, session(350, ACQUIRED_MS + 15_000), LEASE_MS)
    assert live.rate_per_s == 20.0
    assert live.rate_since_ms == ACQUIRED_MS + 5_000


def test_a_report_newer_than_the_renewal_is_the_newer_reading() -> None:
    """Right after a report the last renewal is older than it: the report's seq is the
    newest figure, and the rate runs from the renewal to the report."""
    stream = session_stream(report(370, ACQUIRED_MS + 16_000))
    live = live_progress(stream, session(350, ACQUIRED_MS + 15_000), LEASE_MS)
    assert (live.seq, live.seq_at_ms) == (370, ACQUIRED_MS + 16_000)
    assert (live.rate_per_s, live.rate_since_ms) == (20.0, ACQUIRED_MS + 15_000)


def test_readings_closer_than_the_minimum_window_give_no_rate() -> None:
    at = ACQUIRED_MS + 5_000
    stream = session_stream(report(150, at))
    live = live_progress(stream, session(152, at + MIN_RATE_WINDOW_MS - 1), LEASE_MS)
    assert (live.seq, live.rate_per_s) == (152, None)


def test_a_report_without_a_seq_gives_no_rate() -> None:
    """A holding that had delivered nothing when it reported: no first reading to count from
    (a seq of a feed may start anywhere, so 'nothing' is not 0)."""
    stream = session_stream(report(None, ACQUIRED_MS + 1_000), last_seq=NOTHING_DELIVERED)
    live = live_progress(stream, session(5_000_020, ACQUIRED_MS + 6_000), LEASE_MS)
    assert (live.seq, live.rate_per_s) == (5_000_020, None)


def test_a_vector_entry_of_another_holding_is_not_read() -> None:
    """An entry of an earlier epoch in the slot belongs to another holding."""
    stream = session_stream(report(150, ACQUIRED_MS + 5_000))
    live = live_progress(stream, session(999, ACQUIRED_MS + 15_000, epoch=EPOCH - 1), LEASE_MS)
    assert (live.seq, live.seq_at_ms, live.rate_per_s) == (150, ACQUIRED_MS + 5_000, None)


def test_a_report_of_an_earlier_holding_is_not_read() -> None:
    """Progress written before this holding's acquisition is another holder's."""
    stream = session_stream(report(150, ACQUIRED_MS - 5_000))
    live = live_progress(stream, session(350, ACQUIRED_MS + 15_000), LEASE_MS)
    assert live.rate_per_s is None


def test_a_per_stream_lease_is_read_at_its_expiry_less_the_lease() -> None:
    """A per-stream renewal writes ``last_seq`` and send time + lease."""
    renewed = ACQUIRED_MS + 25_000
    stream = Stream(
        "s1",
        DesiredState.STARTED,
        "wss://feed.example.com/s1",
        "w/1-ab",
        renewed + LEASE_MS,
        600,
        EPOCH,
        1,
        acquired_at_ms=ACQUIRED_MS,
        progress=report(100, ACQUIRED_MS + 5_000),
    )
    live = live_progress(stream, None, LEASE_MS)
    assert (live.seq, live.seq_at_ms, live.rate_per_s) == (600, renewed, 25.0)


def test_a_free_stream_has_its_item_checkpoint_and_no_age() -> None:
    stream = Stream("s1", DesiredState.STOPPED, "wss://feed.example.com/s1", None, 0, 77, EPOCH, 2)
    live = live_progress(stream, None, LEASE_MS)
    assert (live.seq, live.seq_at_ms, live.rate_per_s) == (77, None, None)
