"""The file sink's check as a user runs it: ``python -m local.sink_report`` on a state directory
whose sink the worker's own file sink wrote, holding a known gap and a known repeat.

(The Kinesis sink's check is ``streamlease consume``'s summary: tests/integration/
test_consume_command.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local.supervisor import REPO_ROOT
from streamlease.lease_events import LeaseEvent, LeaseEventKind
from worker.sinks import BatchHeader, FileSink, NoDeadline, SinkRecord, write_batch

pytestmark = pytest.mark.slow

W1, W2 = "t1/101-aaaa", "t2/202-bbbb"


def timeline() -> list[tuple[str, int, str, list[int]]]:
    """``(stream id, epoch, worker, seqs)`` batches: "gappy" skips seq 4 within one holding;
    "repeated" is held by W1 (fenced: it could not hand over), then by W2, which resumed at
    seq 3, so 3 and 4 come twice; "clean" is one holding of 1..3."""
    return [
        ("gappy", 1, W1, [1, 2, 3, 5, 6]),
        ("repeated", 1, W1, [1, 2, 3, 4]),
        ("clean", 1, W1, [1, 2, 3]),
        ("repeated", 2, W2, [3, 4, 5]),
    ]


def write_events(events_dir: Path, now_ms: int) -> None:
    """The lease event logs of both workers, as they write them (``streamlease.lease_events``):
    W1 held every stream from a minute ago and was fenced on "repeated" after 10 s; W2
    acquired "repeated" later (its wall clock ahead, so every record of W1 was written before)."""
    events_dir.mkdir(parents=True)
    start_ms = now_ms - 60_000
    w1 = [
        LeaseEvent(LeaseEventKind.ACQUIRED, sid, 1, W1, 0.0, start_ms, 1_000.0)
        for sid in ("gappy", "repeated", "clean")
    ]
    w1.append(LeaseEvent(LeaseEventKind.FENCED, "repeated", 1, W1, 10.0, start_ms + 10_000))
    w2 = [LeaseEvent(LeaseEventKind.ACQUIRED, "repeated", 2, W2, 600.0, start_ms + 600_000, 2e3)]
    for name, events in (("worker-t1", w1), ("worker-t2", w2)):
        lines = [json.dumps(e.to_dict()) + "\n" for e in events]
        (events_dir / f"{name}.jsonl").write_text("".join(lines))


async def write_state_dir(state_dir: Path) -> None:
    """A state directory as a stack leaves it: the worker's own file sink wrote ``sink/``
    (each record received within its holder's lease), next to the lease events."""
    now_ms = int(time.time() * 1000)
    write_events(state_dir / "events", now_ms)
    sink = FileSink(state_dir / "sink")
    for stream_id, epoch, worker, seqs in timeline():
        base = now_ms - 60_000 if epoch == 1 else now_ms + 540_000
        records = [SinkRecord(s, base + 1_000 * s, b'{"n":%d}' % s) for s in seqs]
        await write_batch(sink, BatchHeader(stream_id, epoch, worker), records, NoDeadline())
    await sink.close()


def sink_report(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m local.sink_report ARGS`` from the repository, as the docs have users run it."""
    return subprocess.run(
        [sys.executable, "-m", "local.sink_report", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_report_counts_each_streams_gap_and_repeats_and_fails_on_the_gap(
    tmp_path: Path,
) -> None:
    await write_state_dir(tmp_path)
    done = sink_report("--state-dir", str(tmp_path), "--json")
    assert done.returncode == 1, done.stderr
    streams = json.loads(done.stdout)["streams"]
    assert {sid: (s["messages"], s["gaps"], s["repeats"]) for sid, s in streams.items()} == {
        "clean": (3, 0, 0),
        "gappy": (5, 1, 0),
        "repeated": (7, 0, 2),
    }
    assert streams["repeated"]["epochs"] == 2


async def test_repeats_alone_pass_and_the_table_names_the_stream(tmp_path: Path) -> None:
    """Repeats are what a kill -9 leaves: counted, not a failure. Stream ids choose."""
    await write_state_dir(tmp_path)
    done = sink_report("--state-dir", str(tmp_path), "repeated", "clean")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line}
    assert rows["repeated"][1:5] == ["7", "1..5", "0", "2"]  # messages, seqs, gaps, repeats
    assert "gappy" not in rows
    assert "no gaps" in done.stdout


def test_no_sink_is_said_and_a_bad_argument_exits_2(tmp_path: Path) -> None:
    missing = sink_report("--state-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "no file sink at" in missing.stderr
    assert sink_report("--first-seq", "soon").returncode == 2


def test_help_says_what_it_reads_and_what_the_exit_status_means() -> None:
    done = sink_report("--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    assert "file sink" in text and "Exit status 0 when no stream has a gap" in text
