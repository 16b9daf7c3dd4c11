"""The local stack's console: ownership changes from lease event logs, one line each."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from local.events import Console, LeaseEventTailer
from streamlease.cli.render import worker_name, worker_row

LABELS = {"t1/1-aaaa": "w1", "t2/2-bbbb": "w2"}
mono = iter(float(i) for i in range(10_000))


def event(kind: str, stream: str, epoch: int, worker: str) -> dict[str, Any]:
    return {
        "event": kind,
        "stream_id": stream,
        "epoch": epoch,
        "worker_id": worker,
        "mono": next(mono),
        "wall_ms": 0,
    }


class Log:
    def __init__(self, directory: Path) -> None:
        self.lines: list[tuple[str, str]] = []
        self.tailer = LeaseEventTailer(directory, self._emit, lambda w: LABELS.get(w, w))
        self.directory = directory

    def _emit(self, kind: str, text: str) -> None:
        self.lines.append((kind, text))

    def write(self, worker_file: str, *events: dict[str, Any], raw: str = "") -> None:
        with open(self.directory / f"{worker_file}.jsonl", "a") as handle:
            handle.write("".join(json.dumps(e) + "\n" for e in events) + raw)

    def pump(self) -> list[tuple[str, str]]:
        self.lines.clear()
        self.tailer.pump()
        return list(self.lines)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(tmp_path)


def test_first_acquisition_is_owned(log: Log) -> None:
    """A stream's first holder is reported as owned, renewals are not events."""
    log.write("w1", event("acquired", "s1", 1, "t1/1-aaaa"), event("renewed", "s1", 1, "t1/1-aaaa"))
    assert log.pump() == [("owned", "s1 owned by w1 (epoch 1)")]
    log.write("w1", event("renewed", "s1", 1, "t1/1-aaaa"))
    assert log.pump() == []


def test_release_then_acquire_is_a_handoff(log: Log) -> None:
    """A graceful release followed by another worker's acquisition is a handoff."""
    log.write(
        "w1", event("acquired", "s1", 1, "t1/1-aaaa"), event("released", "s1", 1, "t1/1-aaaa")
    )
    log.write("w2", event("acquired", "s1", 2, "t2/2-bbbb"))
    assert log.pump()[-1] == ("handoff", "s1 handed off w1 → w2 (epoch 2)")


def test_acquire_without_release_is_a_takeover(log: Log) -> None:
    """A holder that never released (it died) loses the stream to a takeover."""
    log.write("w1", event("acquired", "s1", 1, "t1/1-aaaa"))
    log.write("w2", event("acquired", "s1", 2, "t2/2-bbbb"))
    assert log.pump()[-1] == ("takeover", "s1 taken over by w2 from w1 (epoch 2)")


def test_stop_and_fence_are_reported(log: Log) -> None:
    """A stop is reported when the holder released; a fence as a lost lease."""
    log.write(
        "w1",
        event("acquired", "s1", 1, "t1/1-aaaa"),
        event("stopped", "s1", 1, "t1/1-aaaa"),
        event("released", "s1", 1, "t1/1-aaaa"),
        event("acquired", "s2", 1, "t1/1-aaaa"),
        event("fenced", "s2", 1, "t1/1-aaaa"),
    )
    lines = log.pump()
    assert ("stopped", "s1 stopped, released by w1") in lines
    assert ("lost", "s2 lost by w1: fenced (epoch 1)") in lines


def test_a_resumed_stream_is_not_a_handoff_to_the_same_worker(log: Log) -> None:
    """Stopped, released and started again on the same worker: "resumed", not "w1 → w1"."""
    log.write(
        "w1",
        event("acquired", "s1", 1, "t1/1-aaaa"),
        event("stopped", "s1", 1, "t1/1-aaaa"),
        event("released", "s1", 1, "t1/1-aaaa"),
    )
    log.pump()
    log.write("w1", event("acquired", "s1", 2, "t1/1-aaaa"))
    assert log.pump() == [("resumed", "s1 resumed, owned by w1 (epoch 2)")]


def test_a_resumed_stream_on_another_worker_is_resumed_too(log: Log) -> None:
    """After a stop nobody handed the stream over: whoever takes it next resumed it."""
    log.write(
        "w1",
        event("acquired", "s1", 1, "t1/1-aaaa"),
        event("stopped", "s1", 1, "t1/1-aaaa"),
        event("released", "s1", 1, "t1/1-aaaa"),
    )
    log.pump()
    log.write("w2", event("acquired", "s1", 2, "t2/2-bbbb"))
    assert log.pump() == [("resumed", "s1 resumed, owned by w2 (epoch 2)")]


def test_taking_back_ones_own_released_lease_is_not_a_handoff(log: Log) -> None:
    """A worker that released a stream (not stopped) and acquires it again owns it again."""
    log.write(
        "w1", event("acquired", "s1", 1, "t1/1-aaaa"), event("released", "s1", 1, "t1/1-aaaa")
    )
    log.pump()
    log.write("w1", event("acquired", "s1", 2, "t1/1-aaaa"))
    assert log.pump() == [("owned", "s1 owned by w1 (epoch 2)")]


def test_workers_are_named_as_the_cli_names_them(tmp_path: Path) -> None:
    """By default a console line names a worker exactly as ``streamlease watch`` does."""
    worker_id = "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12"
    lines: list[tuple[str, str]] = []
    tailer = LeaseEventTailer(tmp_path, lambda kind, text: lines.append((kind, text)))
    (tmp_path / "x.jsonl").write_text(json.dumps(event("acquired", "s1", 1, worker_id)) + "\n")
    tailer.pump()
    assert lines == [("owned", f"s1 owned by {worker_name(worker_id)} (epoch 1)")]
    assert worker_row({"id": worker_id})[0] == worker_name(worker_id) == "0f1e2d3c…/4242-ab12"


def test_many_alike_events_fold_into_one_line(log: Log) -> None:
    """A worker taking over ten streams at once is one line, not ten."""
    log.write("w1", *(event("acquired", f"s{i}", 1, "t1/1-aaaa") for i in range(10)))
    log.pump()
    log.write("w2", *(event("acquired", f"s{i}", 2, "t2/2-bbbb") for i in range(10)))
    assert log.pump() == [("takeover", "10 streams taken over by w2 from w1: s0, s1, s2, … (+7)")]


def test_a_torn_line_is_read_once_complete(log: Log) -> None:
    """A line still being written is kept until its end arrives."""
    whole = json.dumps(event("acquired", "s1", 1, "t1/1-aaaa"))
    log.write("w1", raw=whole[:20])
    assert log.pump() == []
    log.write("w1", raw=whole[20:] + "\n")
    assert log.pump() == [("owned", "s1 owned by w1 (epoch 1)")]


def test_garbage_lines_are_skipped(log: Log) -> None:
    """A line that is not JSON (a worker killed mid-write) does not stop the tailer."""
    log.write("w1", raw="{not json\n")
    log.write("w1", event("acquired", "s1", 1, "t1/1-aaaa"))
    assert log.pump() == [("owned", "s1 owned by w1 (epoch 1)")]


def test_console_lines_are_timestamped_and_plain_off_a_terminal() -> None:
    """Each line is time, kind, text; no colour codes when the output is not a terminal."""
    out = io.StringIO()
    Console(out).line("died", "w1 killed by SIGKILL")
    text = out.getvalue()
    assert "\x1b" not in text
    assert text.endswith("  died      w1 killed by SIGKILL\n")
    assert text[2] == ":" and text[8] == "."
