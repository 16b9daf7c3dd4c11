"""JSONL file sink (the local default): one append-only file per stream, flushed per batch."""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Final
from urllib.parse import quote

from streamlease.errors import SinkDeadlinePassed, SinkError
from worker.sinks.base import Deadline, SinkRecord, SinkThread, deadline_passed, encode_record

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


class FileSink:
    """Appends each stream's records to ``<sink_dir>/<sink_file_name(stream id)>``.

    Appends run one batch at a time in the sink's own thread (:class:`SinkThread`), so neither
    the event loop nor the loop's default thread pool waits on the disk, and each batch is
    flushed to the OS before :meth:`write` returns (no fsync). In that thread, right before the
    append, the batch's deadline is checked once more and the time is taken: every record of the
    batch carries it as :attr:`~streamlease.schema.SinkField.WRITTEN_AT_MS`. At most
    ``max_open_files`` files stay open; the least recently written is closed first.
    """

    def __init__(self, sink_dir: str | Path, *, max_open_files: int = 256) -> None:
        self.directory = Path(sink_dir)
        self.records = 0
        self._max_open_files = max_open_files
        self._files: OrderedDict[str, BinaryIO] = OrderedDict()
        self._thread = SinkThread("file-sink")
        self._closed = False

    def path_for(self, stream_id: str) -> Path:
        """The file that holds ``stream_id``'s records."""
        return self.directory / sink_file_name(stream_id)

    async def write(self, records: Sequence[SinkRecord], deadline: Deadline) -> None:
        """Append ``records``. Raises :class:`SinkError` if the disk refuses or after close,
        :class:`SinkDeadlinePassed` (nothing written) if ``deadline`` passed before the append
        started. If the caller is cancelled, an append already queued still runs (and is
        fenced as any other)."""
        if self._closed:
            raise SinkError("sink is closed")
        if not records:
            return
        try:
            await self._thread.run(self._append, records, deadline)
        except OSError as exc:
            raise SinkError(f"file sink write failed ({exc.strerror or 'OS error'})") from exc
        self.records += len(records)

    async def close(self) -> None:
        """Close every open file once the appends queued before are done; later writes raise
        :class:`SinkError`."""
        if self._closed:
            return
        self._closed = True
        await self._thread.run(self._close_all)
        self._thread.shutdown()

    def _append(self, records: Sequence[SinkRecord], deadline: Deadline) -> None:
        """In the sink's thread: the last deadline check, then the append."""
        if deadline_passed(deadline):
            raise SinkDeadlinePassed("fencing deadline passed", unsent=records)
        written_at_ms = time.time_ns() // 1_000_000
        lines: dict[str, list[bytes]] = {}
        for record in records:
            lines.setdefault(record.stream_id, []).append(
                encode_record(record, written_at_ms) + b"\n"
            )
        for stream_id, chunk in lines.items():
            handle = self._open(stream_id)
            handle.write(b"".join(chunk))
            handle.flush()

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
