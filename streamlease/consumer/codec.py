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
(seqs up to 2^63 − 1, :mod:`streamlease.seqs`). When zlib makes the entries smaller (it does
past a few dozen streams: ids of one deployment repeat their characters, seqs of one feed their
high bytes), they are stored compressed under version byte 2. ``bench.consumer_cost`` measures
the items: about 6 bytes a stream for ids like ``c10-00042`` and 27 for random UUIDs, with each
stream at its own epoch and a seq a month into its feed.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Final, NamedTuple

from streamlease.kpl import AggregationError, read_varint, varint

FORMAT: Final = 1
COMPRESSED: Final = 2
_MAX_INFLATED: Final = 64 * 400 * 1024
"""The most bytes decompression may produce: 64 times DynamoDB's item limit, far beyond what
any item's entries take, so a corrupt item cannot inflate without bound."""


class Watermark(NamedTuple):
    """One stream's place: the highest epoch seen and the last seq emitted (architecture §4,
    "Fencing": a consumer drops records older than the newest epoch it has seen)."""

    epoch: int
    seq: int


def encode_marks(marks: Mapping[str, Watermark]) -> bytes:
    """``marks`` (stream id → watermark) as bytes, compressed when that is smaller. Raises
    ``ValueError`` for a negative epoch or seq."""
    entries = _entries(marks)
    packed = zlib.compress(entries)
    if len(packed) < len(entries):
        return bytes([COMPRESSED]) + packed
    return bytes([FORMAT]) + entries


def _entries(marks: Mapping[str, Watermark]) -> bytes:
    out = bytearray()
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
    if not data or data[0] not in (FORMAT, COMPRESSED):
        raise ValueError("watermarks of an unknown format")
    if data[0] == COMPRESSED:
        inflate = zlib.decompressobj()
        try:
            data = b"\x00" + inflate.decompress(data[1:], _MAX_INFLATED)
        except zlib.error:
            raise ValueError("compressed watermarks do not inflate") from None
        if not inflate.eof:
            raise ValueError("compressed watermarks cut short or too large")
    try:
        return _decoded(data)
    except AggregationError:  # a varint cut short
        raise ValueError("watermarks cut short") from None


def _decoded(data: bytes) -> dict[str, Watermark]:
    marks: dict[str, Watermark] = {}
    previous = b""
    position = 1
    while position < len(data):
        shared, position = read_varint(data, position)
        length, position = read_varint(data, position)
        if shared > len(previous) or position + length > len(data):
            raise ValueError("watermarks cut short")
        raw = previous[:shared] + data[position : position + length]
        position += length
        epoch, position = read_varint(data, position)
        seq, position = read_varint(data, position)
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
