"""The fence at the last moment, with real worker processes: a sink write that queued behind a
stalled sink thread until after its holder's deadline, and after another worker took the
stream over, is never written (architecture §4 "Fencing").

Worker A holds a stream with the file sink; its sink's thread is stalled (a hanging disk) so
that A's next batch, already checked against A's deadline by the holder, waits in the queue.
Then A's renewals are held back by the moto server, A's deadline passes, and worker B takes the
stream over and delivers. Only then does A's sink thread come back. Run against the sink as
built and against a mutant without the check in the sink's thread: the invariant checker, which
judges by the sink's own write times, must pass the first and catch the second.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from stalled_sink import RUN_WORKER, control_file
from worker_helpers import Fleet, Streams, new_ids

from local.invariants import format_report, load_kinesis
from local.moto_process import hold_dynamodb_writes
from local.upstream_sim import UpstreamSimulator
from local.worker_process import WorkerProcess
from streamlease.lease_events import LeaseEventKind
from streamlease.schema import Liveness, belongs_to_task, stream_key, worker_key
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from streamlease.sink_fields import SinkField

pytestmark = [pytest.mark.slow, pytest.mark.serial]

HOLD_SECONDS = 30.0
"""How late the moto server applies A's held renewals: long after B took over."""
CLOCK_READING_SECONDS = 0.02
"""How far apart two processes' readings of one wall clock can be (millisecond stamps, an
offset from a median of pairs)."""


def renewals_of(worker: WorkerProcess, stream_id: str, liveness: Liveness) -> list[str]:
    """What identifies ``worker``'s renewals in a request: its session's, or the stream's own."""
    if liveness is Liveness.SESSION:
        return [worker_key(worker.worker_id), "#hb + :one"]
    return [stream_key(stream_id), worker.worker_id, "#exp = :exp, #seq = :seq"]


def wall_offset(events: list[Any]) -> float:
    """Wall seconds − monotonic seconds of one worker, from its lease events."""
    return statistics.median(e.wall_ms / 1000 - e.mono for e in events if e.wall_ms > 0)


def last_deadline(events: list[Any]) -> float:
    """The latest fencing deadline (monotonic) one worker's lease events gave it."""
    return max(
        e.deadline_mono
        for e in events
        if e.deadline_mono is not None
        and e.event
        in (LeaseEventKind.ACQUIRED, LeaseEventKind.RENEWED, LeaseEventKind.SESSION_RENEWED)
    )


def run_scenario(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    settings: Settings,
    liveness: Liveness,
    sink: str,
) -> tuple[str, WorkerProcess, WorkerProcess]:
    """A holds, its sink thread stalls with a batch queued, B takes over, A's thread resumes."""
    a = fleet.start("a", command=RUN_WORKER, liveness=liveness, sink=sink)
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_seq(stream_id, 10)
    b = fleet.start("b", liveness=liveness)
    sessions = SessionStore(streams.dynamodb, settings.table_name)
    fleet.wait(lambda: len([w for w in sessions.list_fleet() if w.is_live]) >= 2, 20, "B live")

    control_file(a.settings, "stall").touch()
    fleet.wait(lambda: control_file(a.settings, "stalled").exists(), 5, "A's sink stalled")
    hold_dynamodb_writes(
        settings.aws_endpoint_url,
        renewals_of(a, stream_id, liveness),
        HOLD_SECONDS,
        count=10_000,
    )
    fleet.wait(
        lambda: any(r[SinkField.WORKER_ID] == b.worker_id for r in fleet.records(stream_id)),
        20,
        "B took the stream over and delivered",
    )
    control_file(a.settings, "resume").touch()
    fleet.wait(lambda: control_file(a.settings, "resumed").exists(), 5, "A's sink resumed")
    written = len(fleet.records(stream_id))
    fleet.wait(lambda: len(fleet.records(stream_id)) >= written + 10, 10, "B delivers on")
    return stream_id, a, b


@pytest.mark.parametrize("liveness", [Liveness.SESSION, Liveness.STREAM])
def test_no_sink_write_starts_after_the_holders_deadline(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    settings: Settings,
    liveness: Liveness,
) -> None:
    """A's queued batch is refused in the sink's thread: every record of A was written before
    A's last fencing deadline (by the sink's own write times), and the checker finds nothing."""
    stream_id, a, _ = run_scenario(
        fleet, streams, upstream, settings, liveness, "stalled_sink:fenced"
    )
    fleet.stop_all()
    report = fleet.report()
    assert report.ok, format_report(report)

    a_events = [e for e in fleet.events() if e.worker_id == a.worker_id]
    deadline = last_deadline(a_events)
    offset = wall_offset(a_events)
    a_writes = [
        r[SinkField.WRITTEN_AT_MS] / 1000 - offset
        for r in fleet.records(stream_id)
        if r[SinkField.WORKER_ID] == a.worker_id
    ]
    assert a_writes and max(a_writes) <= deadline


def test_without_the_check_in_the_sink_thread_the_checker_catches_the_overlap(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, settings: Settings
) -> None:
    """The mutant sink appends A's queued batch when its thread comes back, after B acquired:
    the checker reports the write-time overlap (receive times, file order and seqs alone would
    have shown nothing but ordinary repeats)."""
    stream_id, _, _ = run_scenario(
        fleet, streams, upstream, settings, Liveness.SESSION, "stalled_sink:unfenced"
    )
    fleet.stop_all()
    report = fleet.report()
    stream = report.streams[stream_id]
    assert stream.written_after_takeover >= 1, format_report(report)
    assert any("written after a newer epoch acquired" in v for v in report.violations())


def test_a_self_revoked_session_hands_over_only_after_its_fence_margin(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, settings: Settings
) -> None:
    """Sessions: A's renewals go unanswered while the store answers its reads (a gray failure)
    and a batch of A waits in its stalled sink. A revokes its session and hands the stream over
    itself, but not before its deadline + the fence margin (a send begun before the deadline may
    be under way until then): B's acquire comes after that, by the wall clock both share."""
    stream_id, a, b = run_scenario(
        fleet, streams, upstream, settings, Liveness.SESSION, "stalled_sink:fenced"
    )
    fleet.stop_all()
    report = fleet.report()
    assert report.ok, format_report(report)

    a_events = [e for e in fleet.events() if e.worker_id == a.worker_id]
    deadline = last_deadline(a_events)
    b_acquired_ms = min(
        e.wall_ms
        for e in fleet.events(LeaseEventKind.ACQUIRED, stream_id)
        if e.worker_id.startswith(b.worker_id.split("/")[0])
    )
    margin_passed = deadline + wall_offset(a_events) + settings.fence_margin_seconds
    assert b_acquired_ms / 1000 >= margin_passed - CLOCK_READING_SECONDS, (
        f"B acquired {margin_passed - b_acquired_ms / 1000:.3f} s before A's margin was over"
    )


def test_a_drain_that_gives_up_never_lets_its_batch_land_after_the_release(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, settings: Settings
) -> None:
    """A holds six streams and its sink thread stalls, with a batch of each queued behind the
    stall. B starts and A sheds streams to it: each shed drain gives up on its batch and
    releases, B acquires and delivers. When A's sink comes back, A's session is still live, but
    no batch of a stream A released is written: by the sink's own write times nothing of A
    lands after B acquired, and nothing was submitted after the drain."""
    a = fleet.start("a", command=RUN_WORKER, sink="stalled_sink:fenced")
    ids = new_ids(6)
    for stream_id in ids:
        streams.put(stream_id, upstream.url_for(stream_id))
    for stream_id in ids:
        fleet.wait_seq(stream_id, 5)
    control_file(a.settings, "stall").touch()
    fleet.wait(lambda: control_file(a.settings, "stalled").exists(), 5, "A's sink stalled")
    b = fleet.start("b")

    def delivered_by_b() -> list[str]:
        return [
            s for s in ids if any(r[SinkField.WORKER_ID] == b.worker_id for r in fleet.records(s))
        ]

    moved = fleet.wait(delivered_by_b, 30, "A shed a stream and B delivered it")
    control_file(a.settings, "resume").touch()
    fleet.wait(lambda: control_file(a.settings, "resumed").exists(), 5, "A's sink resumed")
    written = {s: len(fleet.records(s)) for s in moved}
    fleet.wait(
        lambda: all(len(fleet.records(s)) >= written[s] + 5 for s in moved), 10, "B delivers on"
    )
    fleet.stop_all()
    report = fleet.report()
    assert report.ok, format_report(report)
    assert all(report.streams[s].written_after_takeover == 0 for s in moved)


def test_without_the_kinesis_sinks_checks_the_raw_stream_holds_a_late_epoch_the_reader_drops(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, settings: Settings
) -> None:
    """The Kinesis mutant: A's queued call is sent when its thread comes back, after B took the
    stream over and delivered, so the raw stream holds A's older epoch after B's newer one.
    The consumer still reads every seq once, in order: it drops A's late records as stale."""
    a = fleet.start("a", command=RUN_WORKER, sink="stalled_sink:kinesis_unfenced")
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id))

    def raw() -> list[Any]:
        view = load_kinesis(settings)
        return [r for r in view.raw if r.stream_id == stream_id]

    def delivered_by(worker: WorkerProcess) -> bool:
        return any(belongs_to_task(r.worker_id, worker.worker_id) for r in raw())

    fleet.wait(lambda: delivered_by(a), 20, "A delivered to Kinesis")
    b = fleet.start("b", sink="kinesis")
    sessions = SessionStore(streams.dynamodb, settings.table_name)
    fleet.wait(lambda: len([w for w in sessions.list_fleet() if w.is_live]) >= 2, 20, "B live")
    control_file(a.settings, "stall").touch()
    fleet.wait(lambda: control_file(a.settings, "stalled").exists(), 5, "A's sink stalled")
    hold_dynamodb_writes(
        settings.aws_endpoint_url,
        renewals_of(a, stream_id, Liveness.SESSION),
        HOLD_SECONDS,
        count=10_000,
    )
    fleet.wait(lambda: delivered_by(b), 20, "B took the stream over and delivered")
    control_file(a.settings, "resume").touch()
    fleet.wait(lambda: control_file(a.settings, "resumed").exists(), 5, "A's sink resumed")

    def late_epoch() -> bool:
        newest = 0
        for record in raw():
            if record.epoch < newest:
                return True
            newest = max(newest, record.epoch)
        return False

    fleet.wait(late_epoch, 20, "A's queued records landed after B's")
    fleet.stop_all()
    view = load_kinesis(settings)
    seqs = [r.seq for r in view.emitted if r.stream_id == stream_id]
    assert seqs == list(range(1, seqs[-1] + 1))
    counts = view.counts[stream_id]
    assert counts.stale >= 1 and counts.gaps == 0
