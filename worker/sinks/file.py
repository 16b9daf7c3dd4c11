"""JSONL file sink (the local default): one append-only file per stream, flushed per store."""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final
from urllib.parse import quote

from streamlease.errors import SinkError
from worker.sinks.base import (
    LINGER_SECONDS,
    BufferedSink,
    DeadlineClock,
    SinkBatch,
    SinkThread,
    deadline_passed_error,
    encode_record,
)

SUFFIX: Final = ".jsonl"
_MAX_NAME_CHARS: Final = 200  # file systems allow 255 bytes; leave room for the suffix


def sink_file_name(stream_id: str) -> str:
    """A safe file name for ``stream_id``: never a path, never hidden, at most 255 bytes.

    Every character but ``A-Z a-z 0-9 _ . - ~`` is percent-encoded (``a:b/c`` becomes
    ``a%3Ab%2Fc.jsonl``), a leading dot too; a very long id is cut and suffixed with a hash.
    """
    name = quote(stream_id, safe="")
    if name.startswith("."):
        name = "%2E" + name[1:]
    if not name:
        name = "%00empty"
    if len(name) > _MAX_NAME_CHARS:
        digest = hashlib.sha256(stream_id.encode()).hexdigest()[:16]
        name = f"{name[: _MAX_NAME_CHARS - 17]}~{digest}"
    return name + SUFFIX


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of one sink file, parsed, in file order (for checkers and tests)."""
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


class FileSink(BufferedSink):
    """Appends each stream's records to ``<sink_dir>/<sink_file_name(stream id)>``.

    Batches of every stream gather (:class:`~worker.sinks.base.BufferedSink`) and are appended
    in the sink's own thread (:class:`~worker.sinks.base.SinkThread`), so neither the event loop
    nor the loop's default thread pool waits on the disk; each file is flushed to the OS before
    its batch is settled (no fsync). In that thread, right before each batch's append, its
    deadline is checked once more; every record of the batch carries the time the append
    finished as :attr:`~streamlease.sink_fields.SinkField.WRITTEN_AT_MS` (stamped before, and
    written over in place when the append ended in a later millisecond), so a write that lands
    late reads late. At most ``max_open_files`` files stay
    open; the least recently written is closed first.
    """

    def __init__(
        self,
        sink_dir: str | Path,
        *,
        max_open_files: int = 256,
        linger_seconds: float = LINGER_SECONDS,
    ) -> None:
        super().__init__(linger_seconds=linger_seconds)
        self.directory = Path(sink_dir)
        self.records = 0
        self._max_open_files = max_open_files
        self._files: OrderedDict[str, BinaryIO] = OrderedDict()
        self._thread = SinkThread("file-sink")

    def path_for(self, stream_id: str) -> Path:
        """The file that holds ``stream_id``'s records."""
        return self.directory / sink_file_name(stream_id)

    async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        """Append ``batches`` in the sink's thread: a batch whose deadline has passed by the
        time its turn comes is not written (:class:`SinkDeadlinePassed`); one the disk refuses
        fails with :class:`SinkError`."""
        outcomes = await self._thread.run(self._append_all, batches)
        self.records += sum(
            len(b.records) for b, outcome in zip(batches, outcomes, strict=True) if not outcome
        )
        return outcomes

    async def close(self) -> None:
        """Store what was accepted, close every open file; later batches raise
        :class:`SinkError`."""
        if self._closed:
            return
        try:
            await super().close()
            await self._thread.run(self._close_all)
        finally:
            self._thread.shutdown()

    def _append_all(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        """In the sink's thread: for each batch, the last deadline check, then the append."""
        clock = DeadlineClock()
        outcomes: list[SinkError | None] = []
        for batch in batches:
            if not clock.open(batch.deadline):
                outcomes.append(deadline_passed_error(batch.records))
                continue
            header = batch.header
            stamped_ms = time.time_ns() // 1_000_000
            chunk = b"".join([encode_record(header, r, stamped_ms) + b"\n" for r in batch.records])
            try:
                handle = self._open(header.stream_id)
                handle.write(chunk)
                handle.flush()
                written_at_ms = time.time_ns() // 1_000_000
                if written_at_ms != stamped_ms:
                    self._restamp(header.stream_id, chunk, handle.tell(), stamped_ms, written_at_ms)
            except OSError as exc:
                outcomes.append(
                    SinkError(
                        f"file sink write failed ({exc.strerror or 'OS error'})",
                        unsent=batch.records,
                    )
                )
                continue
            outcomes.append(None)
        return outcomes

    def _restamp(
        self, stream_id: str, chunk: bytes, end: int, stamped_ms: int, written_at_ms: int
    ) -> None:
        """The append of ``chunk`` (ending at offset ``end``) finished in a later millisecond
        than its records say: write the time it finished over theirs, in place (the stamp is
        each line's last field, of the same width until the year 2286). The invariant checker
        judges overlaps by this time, so it must not be earlier than the bytes' landing."""
        old, new = b"%d" % stamped_ms, b"%d" % written_at_ms
        if len(old) != len(new):
            return
        start = end - len(chunk)
        # Not through the appending handle: in append mode every write goes to the end.
        with open(self.path_for(stream_id), "r+b") as fixer:
            line_end = chunk.find(b"\n")
            while line_end != -1:
                fixer.seek(start + line_end - 1 - len(old))  # before the line's closing brace
                fixer.write(new)
                line_end = chunk.find(b"\n", line_end + 1)

    def _open(self, stream_id: str) -> BinaryIO:
        handle = self._files.get(stream_id)
        if handle is not None:
            self._files.move_to_end(stream_id)
            return handle
        self.directory.mkdir(parents=True, exist_ok=True)
        while len(self._files) >= self._max_open_files:
            _, oldest = self._files.popitem(last=False)
            oldest.close()
        handle = open(self.path_for(stream_id), "ab")  # noqa: SIM115 - kept open across batches
        self._files[stream_id] = handle
        return handle

    def _close_all(self) -> None:
        while self._files:
            _, handle = self._files.popitem()
            handle.close()
