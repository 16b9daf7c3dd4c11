"""The JSONL file sink: one append-only file per stream, complete lines, safe paths."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from streamlease.errors import SinkError
from streamlease.sink_fields import SinkField
from worker.sinks import (
    BatchHeader,
    FileSink,
    NoDeadline,
    SinkRecord,
    read_records,
    sink_file_name,
    write_batch,
)

ALWAYS = NoDeadline()
"""No fencing deadline: these tests are about the sink alone."""


def record(seq: int) -> SinkRecord:
    payload = b'{"seq":%d,"data":"d%d"}' % (seq, seq)
    return SinkRecord(seq, 1_700_000_000_000 + seq, payload)


async def write(sink: FileSink, *batches: tuple[str, list[int]], epoch: int = 1) -> None:
    """Submit one batch per ``(stream id, seqs)`` at once and wait until all are stored."""
    await asyncio.gather(
        *(
            write_batch(
                sink, BatchHeader(stream_id, epoch, "w-1"), [record(s) for s in seqs], ALWAYS
            )
            for stream_id, seqs in batches
        )
    )


def seqs(path: Path) -> list[int]:
    return [r[SinkField.SEQ] for r in read_records(path)]


def jsonl_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.jsonl"))


async def test_each_stream_gets_its_own_file_in_order(tmp_path: Path) -> None:
    """Records of interleaved streams land in their stream's file, in write order."""
    sink = FileSink(tmp_path)
    await write(sink, ("a", [1, 2]), ("b:1.x", [1]))
    await write(sink, ("b:1.x", [2]), ("a", [3]))
    await sink.close()
    assert seqs(tmp_path / "a.jsonl") == [1, 2, 3]
    assert seqs(tmp_path / sink_file_name("b:1.x")) == [1, 2]
    first = next(read_records(tmp_path / "a.jsonl"))
    assert first[SinkField.PAYLOAD] == {"seq": 1, "data": "d1"}
    assert first[SinkField.EPOCH] == 1 and first[SinkField.WORKER_ID] == "w-1"


async def test_records_are_readable_as_soon_as_write_returns(tmp_path: Path) -> None:
    """Each batch is flushed: another process sees complete lines without a close."""
    sink = FileSink(tmp_path)
    await write(sink, ("a", [1, 2]))
    assert seqs(sink.path_for("a")) == [1, 2]
    await sink.close()


async def test_a_new_sink_appends_to_existing_files(tmp_path: Path) -> None:
    """A restarted worker (or a new owner) continues the same file."""
    for seq in (1, 2):
        sink = FileSink(tmp_path)
        await write(sink, ("a", [seq]), epoch=seq)
        await sink.close()
    assert seqs(tmp_path / "a.jsonl") == [1, 2]


async def test_more_streams_than_open_files_are_handled(tmp_path: Path) -> None:
    """Least recently written files are closed and reopened for append when needed."""
    sink = FileSink(tmp_path, max_open_files=2)
    for seq in (1, 2, 3):
        await write(sink, *((f"s{n}", [seq]) for n in range(5)))
    await sink.close()
    for n in range(5):
        assert seqs(tmp_path / f"s{n}.jsonl") == [1, 2, 3]


async def test_hostile_stream_ids_stay_inside_the_sink_directory(tmp_path: Path) -> None:
    """Path separators and dot-dot in a stream id cannot escape sink_dir."""
    sink_dir = tmp_path / "sink"
    sink = FileSink(sink_dir)
    await write(sink, ("../escape", [1]), ("/etc/x", [1]), ("..", [1]))
    await sink.close()
    assert [p.parent for p in jsonl_files(tmp_path)] == [sink_dir] * 3


async def test_an_unwritable_directory_is_a_sink_error(tmp_path: Path) -> None:
    """OS errors surface as SinkError so the worker counts SinkErrors and gives up the batch."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    sink = FileSink(blocker)
    with pytest.raises(SinkError):
        await write(sink, ("a", [1]))


async def test_write_after_close_is_refused(tmp_path: Path) -> None:
    """Closing is final."""
    sink = FileSink(tmp_path)
    await sink.close()
    with pytest.raises(SinkError):
        await write(sink, ("a", [1]))


class SlowDisk:
    """An open sink file whose appends take a while (a disk under load); notes when each
    append returned."""

    def __init__(self, inner: Any, seconds: float) -> None:
        self._inner = inner
        self._seconds = seconds
        self.appended_ms: list[int] = []

    def write(self, data: bytes) -> int:
        time.sleep(self._seconds)
        written = int(self._inner.write(data))
        self._inner.flush()
        self.appended_ms.append(time.time_ns() // 1_000_000)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SlowFileSink(FileSink):
    def __init__(self, directory: Path, seconds: float) -> None:
        super().__init__(directory)
        self._seconds = seconds
        self.disks: list[SlowDisk] = []

    def _open(self, stream_id: str) -> Any:
        disk = SlowDisk(super()._open(stream_id), self._seconds)
        self.disks.append(disk)
        return disk


async def test_each_record_says_when_its_append_finished_not_when_it_began(
    tmp_path: Path,
) -> None:
    """The invariant checker judges overlaps by the write time: an append that takes long
    must read as late as it landed, for every record of the batch, and earlier batches keep
    their own time."""
    sink = SlowFileSink(tmp_path, 0.05)
    await write(sink, ("a", [1, 2, 3]))
    await write(sink, ("a", [4, 5]))
    await sink.close()
    first, second = (disk.appended_ms[0] for disk in sink.disks)
    stamps = [r[SinkField.WRITTEN_AT_MS] for r in read_records(tmp_path / "a.jsonl")]
    assert all(first <= s <= second for s in stamps[:3]), (stamps, first, second)
    assert all(s >= second for s in stamps[3:]), (stamps, second)
    assert seqs(tmp_path / "a.jsonl") == [1, 2, 3, 4, 5]
