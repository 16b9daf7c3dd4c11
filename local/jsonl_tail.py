"""Reading JSONL files that other processes append to: the one tailer every reader uses.

Workers append lease events, the file sink appends records and the supervisor appends process
exits, a whole line per ``write``. A reader may look while a line is being written, or after its
writer was killed in the middle of one. :class:`JsonlTail` therefore returns complete lines only
and reads a torn one again once its end has arrived; :func:`read_jsonl` reads files whose
writers are done, where a torn last line is counted as malformed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

PARSE_ERRORS = (KeyError, ValueError, TypeError)
"""What a parser raises for a line it rejects (counted as malformed, never raised further)."""


class JsonlTail(Generic[T]):
    """Follows a set of growing JSONL files; each :meth:`read_new` returns what was appended
    since the previous one, each line's object turned into a row by ``parse``.

    A line that is not a JSON object, or that ``parse`` rejects with one of
    :data:`PARSE_ERRORS`, is skipped and counted in :attr:`malformed`; blank lines are skipped.
    A file that does not exist (yet) reads as empty.
    """

    def __init__(self, parse: Callable[[dict[str, Any]], T]) -> None:
        self._parse = parse
        self._offsets: dict[Path, int] = {}
        self.malformed = 0
        """Lines skipped so far because they did not parse."""

    def follow(self, path: Path) -> None:
        """Read ``path`` too, from its start; a no-op for a file already followed."""
        self._offsets.setdefault(Path(path), 0)

    def read_new(self, *, final: bool = False, max_backlog_bytes: int | None = None) -> list[T]:
        """The rows of the lines appended since the last call: file by file, in the order the
        files were first followed, and in file order within a file.

        ``final``: the writers are done, so a last line without its newline is read too (a torn
        one then counts as malformed instead of waiting for its end). ``max_backlog_bytes``:
        of a file with more unread than that, only the whole lines of its last
        ``max_backlog_bytes`` are read (a reader that wants recent lines, not all of them).
        """
        rows: list[T] = []
        for path, offset in self._offsets.items():
            try:
                with open(path, "rb") as handle:
                    size = os.fstat(handle.fileno()).st_size
                    if max_backlog_bytes is not None and size - offset > max_backlog_bytes:
                        handle.seek(size - max_backlog_bytes - 1)
                        handle.readline()  # the end of a line that began before: skipped
                        offset = handle.tell()
                    handle.seek(offset)
                    chunk = handle.read()
            except FileNotFoundError:
                continue
            end = len(chunk) if final else chunk.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            for line in chunk[:end].split(b"\n"):
                if line.strip():
                    self._parse_line(line, rows)
        return rows

    def _parse_line(self, line: bytes, rows: list[T]) -> None:
        try:
            data = json.loads(line.decode("utf-8", errors="replace"))
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            rows.append(self._parse(data))
        except PARSE_ERRORS:
            self.malformed += 1


def read_jsonl(paths: Iterable[Path], parse: Callable[[dict[str, Any]], T]) -> tuple[list[T], int]:
    """Every line of finished JSONL files (in the order given) turned into a row by ``parse``,
    and how many lines were malformed (see :class:`JsonlTail`). Missing files are empty."""
    tail = JsonlTail(parse)
    for path in paths:
        tail.follow(path)
    return tail.read_new(final=True), tail.malformed
