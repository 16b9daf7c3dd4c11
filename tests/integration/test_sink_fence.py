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

from local.invariants import format_report
from local.moto_process import hold_dynamodb_writes
from local.upstream_sim import UpstreamSimulator
from local.worker_process import WorkerProcess
from streamlease.lease_events import LeaseEventKind
from streamlease.schema import Liveness, SinkField, stream_key, worker_key
from streamlease.session_store import SessionStore
from streamlease.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

HOLD_SECONDS = 30.0
"""How late the moto server applies A's held renewals: long after B took over."""


def renewals_of(worker: WorkerProcess, stream_id: str, liveness: Liveness) -> list[str]:
    """What identifies ``worker``'s renewals in a request: its session's, or the stream's own."""
    if liveness is Liveness.SESSION:
        return [worker_key(worker.worker_id), "#hb + :one"]
    return [stream_key(stream_id), worker.worker_id, "#exp = :exp, #seq = :seq"]


def wall_offset(events: list[Any]) -> float:
    """Wall seconds − monotonic seconds of one worker, from its lease events."""
    return statistics.median(e.wall_ms / 1000 - e.mono for e in events if e.wall_ms > 0)


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
    deadline = max(
        e.deadline_mono
        for e in a_events
        if e.deadline_mono is not None
        and e.event
        in (LeaseEventKind.ACQUIRED, LeaseEventKind.RENEWED, LeaseEventKind.SESSION_RENEWED)
    )
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
