"""The sink report: messages, gaps, duplicates and time without an owner per stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from local.invariants import SinkRecord
from local.sink_report import build_report, format_report, handover_silences_ms

W1, W2 = "t1/1-aaaa", "t2/2-bbbb"


def write_records(sink: Path, stream: str, rows: list[tuple[int, int, int]]) -> None:
    """rows: (epoch, seq, received_at_ms)."""
    sink.mkdir(parents=True, exist_ok=True)
    with open(sink / f"{stream}.jsonl", "a") as handle:
        for epoch, seq, at in rows:
            record = {
                "stream_id": stream,
                "epoch": epoch,
                "seq": seq,
                "received_at_ms": at,
                "payload": {},
                "worker_id": W1 if epoch == 1 else W2,
            }
            handle.write(json.dumps(record) + "\n")


def write_events(events: Path, name: str, rows: list[dict[str, Any]]) -> None:
    events.mkdir(parents=True, exist_ok=True)
    with open(events / f"{name}.jsonl", "a") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))


def ev(
    kind: str, epoch: int, worker: str, mono: float, deadline: float | None = None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "event": kind,
        "stream_id": "s1",
        "epoch": epoch,
        "worker_id": worker,
        "mono": mono,
        "wall_ms": 0,
    }
    if deadline is not None:
        row["deadline_mono"] = deadline
    return row


def test_handover_silence_is_measured_at_each_new_epoch() -> None:
    """The silence is the time from the previous record to the first of a newer epoch."""
    records = [
        SinkRecord("s", 1, 1, received_at_ms=1000),
        SinkRecord("s", 1, 2, received_at_ms=1100),
        SinkRecord("s", 2, 2, received_at_ms=2600),
        SinkRecord("s", 2, 3, received_at_ms=2700),
    ]
    assert handover_silences_ms(records) == [1500]


def test_a_clean_stream_has_no_gap_and_no_duplicate(tmp_path: Path) -> None:
    """Seqs 1..5 once each: 5 messages, no gap, no duplicate, one epoch."""
    write_records(tmp_path / "sink", "s1", [(1, n, 1000 + n) for n in range(1, 6)])
    summary = build_report(tmp_path / "sink").stream("s1")
    assert (summary.messages, summary.missing, summary.duplicates, summary.epochs) == (5, 0, 0, 1)
    assert summary.unowned_seconds is None  # no lease events: unknown
    assert summary.ok


def test_missing_seqs_are_gaps(tmp_path: Path) -> None:
    """A seq never delivered, and a first seq above 1, count as missing."""
    write_records(tmp_path / "sink", "s1", [(1, 2, 1), (1, 3, 2), (1, 5, 3)])
    summary = build_report(tmp_path / "sink").stream("s1")
    assert summary.missing == 2
    assert not summary.ok


def test_replays_after_a_takeover_are_duplicates(tmp_path: Path) -> None:
    """The new epoch repeating seqs after the last checkpoint: duplicates, not a violation."""
    write_records(tmp_path / "sink", "s1", [(1, 1, 0), (1, 2, 1), (1, 3, 2), (2, 2, 9), (2, 3, 10)])
    summary = build_report(tmp_path / "sink").stream("s1")
    assert (summary.duplicates, summary.handovers, summary.longest_silence_ms) == (2, 1, 7)


def test_unowned_time_comes_from_lease_events(tmp_path: Path) -> None:
    """Released at 10 s, acquired by the next owner at 12.5 s: 2.5 s without an owner."""
    write_records(tmp_path / "sink", "s1", [(1, 1, 0), (2, 2, 1)])
    write_events(
        tmp_path / "events", "w1", [ev("acquired", 1, W1, 0.0, 20.0), ev("released", 1, W1, 10.0)]
    )
    write_events(tmp_path / "events", "w2", [ev("acquired", 2, W2, 12.5, 40.0)])
    summary = build_report(tmp_path / "sink", tmp_path / "events").stream("s1")
    assert summary.unowned_seconds == 2.5


def test_a_killed_workers_holding_ends_at_its_exit(tmp_path: Path) -> None:
    """A worker killed at 5 s whose lease the reaper freed at once: no overlap with the next
    owner once its exit is known; without the exit the checker would see one."""
    write_records(tmp_path / "sink", "s1", [(1, 1, 0), (2, 2, 6000)])
    write_events(tmp_path / "events", "w1", [ev("acquired", 1, W1, 0.0, 20.0)])
    write_events(tmp_path / "events", "w2", [ev("acquired", 2, W2, 6.0, 26.0)])
    exits = tmp_path / "exits.jsonl"
    exits.write_text(json.dumps({"task_id": "t1", "label": "w1", "mono": 5.0}) + "\n")
    without = build_report(tmp_path / "sink", tmp_path / "events").stream("s1")
    assert any("overlap" in v for v in without.violations)
    summary = build_report(tmp_path / "sink", tmp_path / "events", exits_path=exits).stream("s1")
    assert summary.violations == ()
    assert summary.unowned_seconds == 1.0


def test_a_holding_handed_off_before_its_worker_exits_ends_at_its_release(
    tmp_path: Path,
) -> None:
    """Released and handed off at 3 s, its worker's session renewed on until the worker was
    killed at 7 s; the next owner took the stream at 3.1 s. The release ends the holding, so
    neither the handoff logged after it nor the later exit opens it again: no overlap."""
    write_records(tmp_path / "sink", "s1", [(1, 1, 0), (2, 2, 3100)])
    renewals = [
        {
            "event": "session_renewed",
            "stream_id": "",
            "epoch": 0,
            "worker_id": W1,
            "mono": m,
            "wall_ms": 0,
            "deadline_mono": m + 2.0,
        }
        for m in (0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5)
    ]
    write_events(
        tmp_path / "events",
        "w1",
        [
            ev("acquired", 1, W1, 0.0, 2.0),
            ev("released", 1, W1, 3.0, 3.0),
            ev("handoff", 1, W1, 3.0),
        ],
    )
    write_events(tmp_path / "events", "w1", renewals)
    write_events(tmp_path / "events", "w2", [ev("acquired", 2, W2, 3.1, 5.1)])
    exits = tmp_path / "exits.jsonl"
    exits.write_text(json.dumps({"task_id": "t1", "label": "w1", "mono": 7.0}) + "\n")
    summary = build_report(tmp_path / "sink", tmp_path / "events", exits_path=exits).stream("s1")
    assert summary.violations == ()


def test_report_lists_requested_streams_even_if_silent(tmp_path: Path) -> None:
    """A stream the sink never saw is listed with no messages, so a dead stream is visible."""
    write_records(tmp_path / "sink", "s1", [(1, 1, 0)])
    report = build_report(tmp_path / "sink", stream_ids=["s1", "s2"])
    assert [s.stream_id for s in report.streams] == ["s1", "s2"]
    assert report.stream("s2").messages == 0
    text = format_report(report)
    assert "2 streams, 1 messages, 0 missing, 0 duplicates" in text
