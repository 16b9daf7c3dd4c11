"""The watermarks of one shard as bytes: what a watermark item stores (pure).

Every commit writes the whole map of a shard's streams, so its size is the consumer's state
cost: DynamoDB bills a write 1 unit per started KB of the item. The encoding is therefore
compact binary, with the stream ids sorted and front-coded (ids of one deployment share long
prefixes: ``meeting:2026-11-30.7``, ``meeting:2026-11-30.8``)::

    version byte (1)
    per stream, in id order:
      varint(bytes shared with the previous id)  varint(length of the rest)  the rest (UTF-8)
      varint(epoch)  varint(seq)

Varints are protobuf's (:func:`streamlease.kpl.varint`); epochs and seqs are whole numbers
(seqs up to 2^63 − 1, :mod:`streamlease.seqs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from streamlease.kpl import varint

FORMAT: Final = 1


class Watermark(NamedTuple):
    """One stream's place: the highest epoch seen and the last seq emitted (architecture §4,
    "Fencing": a consumer drops records older than the newest epoch it has seen)."""

    epoch: int
    seq: int


def encode_marks(marks: Mapping[str, Watermark]) -> bytes:
    """``marks`` (stream id → watermark) as bytes. Raises ``ValueError`` for a negative
    epoch or seq."""
    out = bytearray([FORMAT])
    previous = b""
    for stream_id in sorted(marks):
        raw = stream_id.encode()
        shared = _shared(previous, raw)
        mark = marks[stream_id]
        if mark.epoch < 0 or mark.seq < 0:
            raise ValueError("a watermark's epoch and seq are 0 or more")
        rest = raw[shared:]
        out += varint(shared) + varint(len(rest)) + rest + varint(mark.epoch) + varint(mark.seq)
        previous = raw
    return bytes(out)


def decode_marks(data: bytes) -> dict[str, Watermark]:
    """The watermarks in ``data`` (:func:`encode_marks`'s output). Raises ``ValueError`` when
    the bytes are not that format."""
    if not data or data[0] != FORMAT:
        raise ValueError("watermarks of an unknown format")
    marks: dict[str, Watermark] = {}
    previous = b""
    position = 1
    while position < len(data):
        shared, position = _read_varint(data, position)
        length, position = _read_varint(data, position)
        if shared > len(previous) or position + length > len(data):
            raise ValueError("watermarks cut short")
        raw = previous[:shared] + data[position : position + length]
        position += length
        epoch, position = _read_varint(data, position)
        seq, position = _read_varint(data, position)
        try:
            marks[raw.decode()] = Watermark(epoch, seq)
        except UnicodeDecodeError:
            raise ValueError("a watermark's stream id is not UTF-8") from None
        previous = raw
    return marks


def _shared(a: bytes, b: bytes) -> int:
    """Bytes ``a`` and ``b`` start with in common (ids are compared and rebuilt as bytes, so a
    shared prefix may end inside a character)."""
    limit = min(len(a), len(b))
    n = 0
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("watermarks cut short")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
