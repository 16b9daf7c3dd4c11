"""The one tailer of growing JSONL files: complete lines only, torn ones counted once final."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from local.jsonl_tail import JsonlTail, read_jsonl


def seq_of(data: dict[str, Any]) -> int:
    return int(data["seq"])


def test_only_complete_lines_are_read_and_a_torn_one_waits_for_its_end(tmp_path: Path) -> None:
    """A line still being written is read once its newline arrives, not before, not twice."""
    path = tmp_path / "a.jsonl"
    tail = JsonlTail(seq_of)
    tail.follow(path)
    assert tail.read_new() == []  # not created yet
    path.write_text('{"seq": 1}\n{"se')
    assert tail.read_new() == [1]
    with open(path, "a") as handle:
        handle.write('q": 2}\n')
    assert tail.read_new() == [2]
    assert tail.read_new() == []
    assert tail.malformed == 0


def test_bad_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    """Not JSON, not an object, or rejected by the parser: counted; blank lines are not."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"seq": 1}\n\n{broken\n[1]\n{"other": 1}\n{"seq": 2}\n')
    tail = JsonlTail(seq_of)
    tail.follow(path)
    assert tail.read_new() == [1, 2]
    assert tail.malformed == 3


def test_finished_files_count_a_torn_last_line(tmp_path: Path) -> None:
    """When the writers are done, a last line without its newline is read: a torn one is
    malformed, a whole one a row; files come in the order given."""
    first, second = tmp_path / "b.jsonl", tmp_path / "a.jsonl"
    first.write_text('{"seq": 1}\n{"seq": 2}')
    second.write_text('{"seq": 3}\n{"seq')
    assert read_jsonl([first, second, tmp_path / "missing.jsonl"], seq_of) == ([1, 2, 3], 1)


def test_only_a_newline_byte_ends_a_line(tmp_path: Path) -> None:
    """A JSON string may hold U+2028 or U+0085 unescaped (the sink keeps payloads as sent):
    the record stays one line."""
    path = tmp_path / "a.jsonl"
    path.write_bytes('{"seq": 1, "text": "a\u2028b\u0085c"}\n'.encode())
    assert read_jsonl([path], seq_of) == ([1], 0)
