"""The invariant checker on synthetic lease-event logs and sink records (no processes)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from local.invariants import (
    EXITED,
    EXPIRED,
    SinkRecord,
    check,
    check_files,
    current_owners,
    format_report,
    load_events,
    load_records,
    segments_of,
)
from streamlease.lease_events import LeaseEvent
from streamlease.sink_fields import SinkField

LEASE = 2.0
MARGIN = 0.5


def hold(
    stream: str,
    epoch: int,
    worker: str,
    start: float,
    renewals: int = 0,
    every: float = 0.5,
    end: str | None = None,
    end_at: float | None = None,
) -> list[LeaseEvent]:
    """Events of one holder: acquire at ``start``, ``renewals`` renewals, an optional end event."""
    events = [LeaseEvent("acquired", stream, epoch, worker, start, 0, start + LEASE - MARGIN)]
    for i in range(1, renewals + 1):
        t = start + i * every
        events.append(LeaseEvent("renewed", stream, epoch, worker, t, 0, t + LEASE - MARGIN))
    if end is not None:
        assert end_at is not None
        events.append(LeaseEvent(end, stream, epoch, worker, end_at))
    return events


def recs(stream: str, epoch: int, seqs: range | list[int], source: str = "f") -> list[SinkRecord]:
    return [SinkRecord(stream, epoch, s, source=source) for s in seqs]


def test_graceful_handoff_is_clean_and_reports_the_takeover() -> None:
    """Release then acquire by another worker: no violation, one takeover, its unowned gap."""
    events = hold("s", 1, "w1", 0.0, 4, end="released", end_at=2.2) + hold("s", 2, "w2", 2.5)
    report = check(events, recs("s", 1, range(1, 21)) + recs("s", 2, range(21, 30)))
    assert report.ok, format_report(report)
    (takeover,) = report.takeovers
    assert (takeover.from_end_reason, takeover.to_worker, takeover.duplicates) == (
        "released",
        "w2",
        0,
    )
    assert takeover.unowned_seconds == pytest.approx(0.3)


def test_acquire_before_the_previous_holders_deadline_is_an_overlap() -> None:
    """A killed holder may deliver until its deadline: an earlier takeover overlaps."""
    events = hold("s", 1, "w1", 0.0, 2) + hold("s", 2, "w2", 2.0)  # w1's deadline: 2.5
    report = check(events, [])
    assert not report.ok
    assert report.overlaps == 1
    (overlap,) = report.streams["s"].overlaps
    assert overlap.seconds == pytest.approx(0.5)
    assert "overlap" in report.violations()[0]


def test_acquire_after_a_crashed_holders_deadline_is_not_an_overlap() -> None:
    """A killed holder's segment ends at its last deadline; a later acquire is fine."""
    events = hold("s", 1, "w1", 0.0, 2) + hold("s", 2, "w2", 3.0)
    report = check(events, [])
    assert report.ok
    assert report.takeovers[0].from_end_reason == EXPIRED
    assert report.takeovers[0].unowned_seconds == pytest.approx(0.5)


def test_fenced_event_ends_the_segment_at_the_earlier_of_it_and_the_deadline() -> None:
    """A fence noticed after the deadline still ends the segment at the deadline."""
    (early,) = segments_of(hold("s", 1, "w1", 0.0, end="fenced", end_at=1.0))
    (late,) = segments_of(hold("s", 1, "w1", 0.0, end="fenced", end_at=9.0))
    assert (early.end, early.end_reason) == (1.0, "fenced")
    assert (late.end, late.end_reason) == (1.5, "fenced")


def test_a_lost_event_that_says_when_delivery_stopped_ends_the_segment_there() -> None:
    """A shed holder's release landed but its answer was lost; its session renewed meanwhile
    (which renews its holdings on paper) and the retry found w2's epoch. The holding ended when
    the release was sent (the event's deadline), so w2's acquisition after it is no overlap."""
    events = hold("s", 1, "w1", 0.0, 2)  # deadline 2.5
    events.append(LeaseEvent("renewed", "s", 1, "w1", 1.8, 0, 3.3))  # the session's renewal
    events.append(LeaseEvent("lost", "s", 1, "w1", 2.4, 0, 1.2))  # released at 1.2
    report = check(events + hold("s", 2, "w2", 1.4), [])
    assert report.ok, report.violations()
    (segment, *_) = segments_of(events)
    assert (segment.end, segment.end_reason) == (1.2, "lost")


def test_a_renewal_after_the_holder_lapsed_opens_a_new_segment() -> None:
    """A holder that missed its deadline and then renewed could not deliver in between."""
    events = hold("s", 1, "w1", 0.0)
    events.append(LeaseEvent("renewed", "s", 1, "w1", 4.0, 0, 5.5))
    first, second = segments_of(events)
    assert (first.start, first.end, first.end_reason) == (0.0, 1.5, EXPIRED)
    assert (second.start, second.end) == (4.0, 5.5)


def test_one_epoch_claimed_by_two_workers_is_a_violation() -> None:
    """Epochs are unique per acquisition: two workers with the same epoch won the same write."""
    events = hold("s", 1, "w1", 0.0, end="released", end_at=0.5) + hold("s", 1, "w2", 1.0)
    report = check(events, [])
    assert report.streams["s"].epoch_conflicts == [(1, ("w1", "w2"))]
    assert not report.ok


def test_a_missing_seq_in_the_middle_is_a_gap() -> None:
    """Seqs 5 and 6 never delivered."""
    report = check(hold("s", 1, "w1", 0.0), recs("s", 1, [1, 2, 3, 4, 7, 8]))
    gaps = report.streams["s"].seq_gaps
    assert [(g.after_seq, g.missing) for g in gaps] == [(4, 2)]
    assert report.missing == 2
    assert not report.ok


def test_a_late_first_seq_is_a_gap_only_when_the_first_seq_is_expected() -> None:
    """Starting at seq 3 loses 1 and 2 when the stream was fresh."""
    events, records = hold("s", 1, "w1", 0.0), recs("s", 1, range(3, 10))
    assert check(events, records).ok
    strict = check(events, records, expected_first_seq=1)
    assert [(g.after_seq, g.missing) for g in strict.streams["s"].seq_gaps] == [(0, 2)]


def test_duplicates_are_attributed_to_the_takeover_that_replayed_them() -> None:
    """After a crash the new holder resumes from the last checkpoint and repeats 18..20."""
    events = hold("s", 1, "w1", 0.0, 2) + hold("s", 2, "w2", 3.0)
    records = recs("s", 1, range(1, 21)) + recs("s", 2, range(18, 30))
    report = check(events, records)
    assert report.ok, format_report(report)
    assert report.duplicates == 3
    assert report.takeovers[0].duplicates == 3
    assert report.duplicates_after([EXPIRED]) == 3
    assert report.duplicates_after(["released"]) == 0


def test_a_repeat_within_one_epoch_is_a_violation() -> None:
    """One holder delivering a seq twice is a bug, not failover."""
    report = check(hold("s", 1, "w1", 0.0), recs("s", 1, [1, 2, 2, 3]))
    assert report.streams["s"].same_epoch_duplicates == 1
    assert not report.ok


def test_a_late_write_of_an_older_epoch_is_dropped_not_a_violation() -> None:
    """A holder frozen between its deadline check and its write appends an old-epoch record
    after the new holder's; a consumer fencing by epoch drops it, and the new holder replayed it."""
    events = hold("s", 1, "w1", 0.0, end="fenced", end_at=1.0) + hold("s", 2, "w2", 2.0)
    records = recs("s", 1, [1, 2]) + recs("s", 2, [3, 4]) + recs("s", 1, [3]) + recs("s", 2, [5])
    report = check(events, records)
    assert report.ok, format_report(report)
    assert report.streams["s"].late_writes == 1
    assert report.duplicates == 0  # the late record is not what a consumer keeps


def test_a_late_write_whose_message_nobody_replayed_is_a_gap() -> None:
    """Dropping the late record loses seq 3 if the new holder resumed after it."""
    events = hold("s", 1, "w1", 0.0, end="fenced", end_at=1.0) + hold("s", 2, "w2", 2.0)
    records = recs("s", 1, [1, 2]) + recs("s", 2, [4]) + recs("s", 1, [3]) + recs("s", 2, [5])
    report = check(events, records)
    assert [(g.after_seq, g.missing) for g in report.streams["s"].seq_gaps] == [(2, 1)]


def test_late_writes_compare_records_of_one_file_only() -> None:
    """Order across files means nothing (per-worker files are appended independently)."""
    events = hold("s", 1, "w1", 0.0, end="released", end_at=1.0) + hold("s", 2, "w2", 2.0)
    records = recs("s", 2, [3], source="b") + recs("s", 1, [1, 2], source="a")
    assert check(events, records).streams["s"].late_writes == 0


def timed(ev: LeaseEvent, wall_offset_s: float = 1000.0) -> LeaseEvent:
    """The event with a wall-clock stamp ``wall_offset_s`` ahead of its monotonic one."""
    return dataclasses.replace(ev, wall_ms=round((ev.mono + wall_offset_s) * 1000))


def test_a_record_received_after_its_holders_deadline_is_a_violation() -> None:
    """Receive times (wall clock) are placed on the monotonic clock through the holder's events:
    a message received after the deadline was delivered outside the lease."""
    events = [timed(e) for e in hold("s", 1, "w1", 0.0, 1)]  # deadline 2.0
    inside = SinkRecord("s", 1, 1, "w1", received_at_ms=1_001_900)
    outside = SinkRecord("s", 1, 2, "w1", received_at_ms=1_002_300)
    report = check(events, [inside, outside])
    assert report.streams["s"].records_outside_lease == 1
    assert "received outside their lease" in report.violations()[0]


def written(
    stream: str, epoch: int, seq: int, worker: str, at_mono: float, received_mono: float = 0.1
) -> SinkRecord:
    """A record received at ``received_mono`` and written at ``at_mono`` (monotonic seconds,
    stamped on the wall clock of :func:`timed`)."""
    wall_ms = [round((t + 1000.0) * 1000) for t in (received_mono, at_mono)]
    return SinkRecord(stream, epoch, seq, worker, wall_ms[0], written_at_ms=wall_ms[1])


def test_a_record_written_after_a_newer_epoch_acquired_is_a_violation_however_short() -> None:
    """Received inside its lease and appended before the new holder's records (so no late
    write, no duplicate, no gap), but written 20 ms after epoch 2 acquired: two holders
    delivered at once. Only the sink's write time shows it."""
    events = [timed(e) for e in hold("s", 1, "w1", 0.0) + hold("s", 2, "w2", 1.6)]  # w1: 1.5
    records = [written("s", 1, 1, "w1", 0.5), written("s", 1, 2, "w1", 1.62)]
    records.append(written("s", 2, 3, "w2", 1.7, received_mono=1.65))
    report = check(events, records)
    stream = report.streams["s"]
    assert (stream.written_after_takeover, stream.late_writes, stream.records_outside_lease) == (
        1,
        0,
        0,
    )
    assert stream.write_overlap_seconds == pytest.approx(0.02, abs=0.002)
    assert "written after a newer epoch acquired" in report.violations()[0]


def test_a_write_just_before_the_takeover_or_without_a_write_time_is_fine() -> None:
    """Written 10 ms before epoch 2 acquired; a record of a sink that stamps no write time is
    not judged by it."""
    events = [timed(e) for e in hold("s", 1, "w1", 0.0) + hold("s", 2, "w2", 1.6)]
    records = [written("s", 1, 1, "w1", 1.59), SinkRecord("s", 1, 2, "w1", 1_000_100)]
    records.append(written("s", 2, 3, "w2", 1.7, received_mono=1.65))
    report = check(events, records)
    assert report.ok, format_report(report)


def test_a_record_of_an_epoch_without_lease_events_is_a_violation() -> None:
    """Nothing may be delivered under an epoch its holder never logged acquiring."""
    report = check(hold("s", 1, "w1", 0.0), recs("s", 1, [1]) + recs("s", 2, [2]))
    assert report.streams["s"].records_outside_lease == 1


def test_a_dead_workers_segments_end_when_it_was_seen_dead() -> None:
    """The reaper frees a killed worker's leases before their deadlines: not an overlap, because
    the process had exited (the testbed tells the checker when it saw it dead)."""
    events = hold("s", 1, "w1", 0.0, 2) + hold("s", 2, "w2", 1.5)  # w1's deadline: 2.5
    assert check(events, []).overlaps == 1
    report = check(events, [], worker_exits={"w1": 1.2})
    assert report.ok
    assert report.takeovers[0].from_end_reason == EXITED
    assert report.takeovers[0].unowned_seconds == pytest.approx(0.3)


def test_unowned_time_runs_from_first_acquisition_to_the_end_of_observation() -> None:
    """Default window: gaps between segments and after the last one count."""
    events = hold("s", 1, "w1", 0.0, end="released", end_at=1.0) + hold(
        "s", 2, "w2", 1.5, end="released", end_at=2.0
    )
    report = check(events, [], observation_end=3.0)
    stream = report.streams["s"]
    assert stream.unowned_periods == [(1.0, 1.5), (2.0, 3.0)]
    assert stream.unowned_seconds == pytest.approx(1.5)


def test_unowned_time_counts_only_the_wanted_windows() -> None:
    """A stream stopped on purpose is not unowned while stopped; before its first owner it is."""
    events = hold("s", 1, "w1", 1.0, end="released", end_at=2.0) + hold("s", 2, "w2", 5.0)
    report = check(events, [], wanted={"s": [(0.5, 2.0), (4.0, 6.0)]})
    assert report.streams["s"].unowned_periods == [(0.5, 1.0), (4.0, 5.0)]


def test_a_wanted_stream_that_was_never_owned_is_unowned_throughout() -> None:
    """Nobody picked the stream up at all."""
    report = check([], [], wanted={"s": [(0.0, 2.0)]})
    assert report.streams["s"].unowned_seconds == pytest.approx(2.0)


def test_payload_verification_counts_records_that_do_not_match() -> None:
    """A corrupted or mixed-up payload is a violation when a verifier is given."""
    records = [SinkRecord("s", 1, 1, payload="ok"), SinkRecord("s", 1, 2, payload="bad")]
    report = check(hold("s", 1, "w1", 0.0), records, verify_payload=lambda r: r.payload == "ok")
    assert report.streams["s"].bad_payloads == 1
    assert not report.ok


def test_loaders_read_directories_and_count_torn_lines(tmp_path: Path) -> None:
    """A worker killed mid-write leaves a torn line: counted, the rest still read."""
    events_file = tmp_path / "events.jsonl"
    lines = [
        {"event": "acquired", "stream_id": "s", "epoch": 1, "worker_id": "w1", "mono": 1.0}
        | {"wall_ms": 5, "deadline_mono": 2.5},
        {"event": "released", "stream_id": "s", "epoch": 1, "worker_id": "w1", "mono": 2.0},
    ]
    events_file.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"event": "ren')
    sink = tmp_path / "sink"
    sink.mkdir()
    rows = [
        {SinkField.STREAM_ID: "s", SinkField.EPOCH: 1, SinkField.SEQ: n, SinkField.PAYLOAD: "x"}
        for n in (1, 2)
    ]
    (sink / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    events, bad_events = load_events(events_file)
    records, bad_records = load_records(sink)
    assert (len(events), bad_events, len(records), bad_records) == (2, 1, 2, 1)
    assert events[0].deadline_mono == 2.5
    report = check_files(events_file, sink)
    assert report.malformed_lines == 2
    assert report.ok


def test_missing_files_read_as_empty(tmp_path: Path) -> None:
    """A worker that never wrote its log is not an error of the checker."""
    assert load_events(tmp_path / "nope.jsonl") == ([], 0)


def test_the_text_report_lists_violations_and_takeovers() -> None:
    """What a failing scenario prints names the stream, the epochs and the workers."""
    events = hold("s", 1, "w1", 0.0, 2) + hold("s", 2, "w2", 2.0)
    text = format_report(check(events, recs("s", 1, [1, 2]) + recs("s", 2, [2, 3])))
    assert "VIOLATIONS (1)" in text
    assert "epoch 1 (w1, expired) -> 2 (w2)" in text
    assert "1 duplicates (1 after expired)" in text


def test_a_clean_report_says_so() -> None:
    """The summary of a clean run."""
    text = format_report(check(hold("s", 1, "w1", 0.0), recs("s", 1, [1, 2])))
    assert "no invariant violated" in text
    assert "0 overlaps" in text


def test_stopped_ends_the_segment_and_the_release_after_it_changes_nothing() -> None:
    """``stopped`` promises no delivery after it; the ``released`` that follows is later."""
    events = hold("s", 1, "w1", 0.0, end="stopped", end_at=0.6)
    events.append(LeaseEvent("released", "s", 1, "w1", 0.8))
    (segment,) = segments_of(events)
    assert (segment.end, segment.end_reason) == (0.6, "stopped")


def test_a_holder_reacquiring_its_own_lapsed_epoch_may_replay_from_the_checkpoint() -> None:
    """Fenced during an outage, then re-acquired at the same epoch: repeats are a takeover's."""
    events = hold("s", 3, "w1", 0.0, end="fenced", end_at=1.5) + hold("s", 3, "w1", 4.0)
    report = check(events, recs("s", 3, [*range(1, 11), *range(8, 15)]))
    assert report.ok, format_report(report)
    (takeover,) = report.takeovers
    assert (takeover.from_epoch, takeover.to_epoch, takeover.from_end_reason) == (3, 3, "fenced")
    assert takeover.duplicates == 3
    assert [s.acquisition for s in report.streams["s"].segments] == [0, 1]


def test_records_of_a_stream_with_no_lease_events_at_all_are_not_placed() -> None:
    """A sink read on its own (no event log) checks seqs only: nothing to place records in."""
    report = check([], recs("s", 1, [1, 2, 4]))
    assert report.streams["s"].records_outside_lease == 0
    assert report.missing == 1


def test_a_dead_worker_owns_nothing_once_its_successor_lets_go() -> None:
    """Killed and reaped, then its successor drained: the stream has no owner, although the dead
    worker's last deadline has not passed (it must not look like the stream's new holder)."""
    killed = hold("s", 1, "w1", 0.0, 2)  # deadline 2.5; seen dead at 1.2
    assert current_owners(killed + hold("s", 2, "w2", 1.5), 1.8, worker_exits={"w1": 1.2}) == {
        "s": "w2"
    }
    events = killed + hold("s", 2, "w2", 1.5, end="released", end_at=2.0)
    assert current_owners(events, 2.1) == {"s": "w1"}  # on paper only, until 2.5
    assert current_owners(events, 2.1, worker_exits={"w1": 1.2}) == {}


def test_of_two_holders_still_on_paper_the_newer_epoch_owns_the_stream() -> None:
    """A frozen holder's deadline outlives its successor's acquisition: the successor owns it,
    in whatever order the two workers' logs were read."""
    frozen, successor = hold("s", 1, "w1", 0.0, 2), hold("s", 2, "w2", 1.5)
    assert current_owners(frozen + successor, 2.0) == {"s": "w2"}
    assert current_owners(successor + frozen, 2.0) == {"s": "w2"}


def test_owners_at_a_past_moment_include_a_holder_that_let_go_since() -> None:
    """Asked about 1.0 after a release at 1.5, the releasing holder still owned the stream."""
    events = hold("s", 1, "w1", 0.0, 2, end="released", end_at=1.5)
    assert current_owners(events, 1.0) == {"s": "w1"}
    assert current_owners(events, 1.6) == {}
