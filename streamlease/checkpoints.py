"""The checkpoint vector a session renewal carries: ``(epoch, last_seq)`` of every held stream,
each tied to its stream by a short tag of the stream id.

A session's streams are numbered by *slot* (a small integer stored on the stream item at
acquire, :attr:`~streamlease.schema.StreamAttr.LEASE_SLOT`); the vector holds, per slot, the
epoch the stream is held at, a 16-bit tag of its stream id (:func:`stream_tag`) and the last seq
its sink acknowledged, or nothing for a free slot. It is binary to keep the worker item small (a
worker at 100 streams stays well under 1 KB):

- one version byte (:data:`FORMAT_VERSION`);
- then per slot, in slot order: ``varint(epoch)``, followed, when the epoch is not 0, by the tag
  (2 bytes, big-endian) and ``varint(last_seq)`` (a free slot is the single byte 0);
- trailing free slots are left out.

Varints are unsigned LEB128. Version 1 (:data:`UNTAGGED_VERSION`, written by workers that
predate tags) is the same without the tag; it is still read, its entries with ``tag`` None.

A takeover merges the vector into the stream item (:func:`streamlease.rules.checkpoint_for`):
an entry counts only for the epoch it names *and* the stream its tag names, so an entry left
over from an earlier holding of the slot, or written by another stream that was given the slot
while a stale stream item still pointed at it, is never applied. An untagged entry (a vector
written by an older worker during a rolling deploy) is matched by epoch alone, as that worker
would have matched it: refusing it would resume its streams from their items' ``last_seq``,
possibly hours old.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final, NamedTuple

from streamlease.seqs import MAX_SEQ

FORMAT_VERSION: Final = 2
UNTAGGED_VERSION: Final = 1
"""The format before tags: read, never written."""
TAG_BYTES: Final = 2
MAX_SLOT_BYTES: Final = 9 + TAG_BYTES + 9
"""Worst case of one slot: an epoch and a seq of at most 2^63 − 1 (9-byte varints each) and the
tag (the item-size bound of a session)."""


class Checkpoint(NamedTuple):
    """One held stream's entry: its epoch, acknowledged seq and stream tag (None: an entry of
    the untagged format, whose stream is unknown)."""

    epoch: int
    last_seq: int
    tag: int | None = None


def stream_tag(stream_id: str) -> int:
    """The 16-bit tag of ``stream_id``: BLAKE2b of its UTF-8 with a 2-byte digest, as a
    big-endian number. Stable across processes, versions and languages (it is stored)."""
    digest = hashlib.blake2b(stream_id.encode(), digest_size=TAG_BYTES).digest()
    return int.from_bytes(digest, "big")


def carriable(epoch: int, seq: int, tag: int) -> bool:
    """Whether a vector can carry this entry: an epoch in ``1 .. MAX_SEQ``, a seq in
    ``0 .. MAX_SEQ`` and a 16-bit tag."""
    return 0 < epoch <= MAX_SEQ and 0 <= seq <= MAX_SEQ and not tag >> 16


def encode(entries: Sequence[Checkpoint | None]) -> bytes:
    """The vector of ``entries`` (index = slot). Raises ``ValueError`` for an epoch outside
    ``1 .. MAX_SEQ``, a seq outside ``0 .. MAX_SEQ``, or a tag that is not 16 bits."""
    out = bytearray((FORMAT_VERSION,))
    last = len(entries)
    while last and entries[last - 1] is None:
        last -= 1
    for entry in entries[:last]:
        if entry is None:
            out.append(0)
            continue
        epoch, seq, tag = entry
        if tag is None or not carriable(epoch, seq, tag):
            raise ValueError(f"invalid checkpoint {entry!r}")
        _put_varint(out, epoch)
        out += tag.to_bytes(TAG_BYTES, "big")
        _put_varint(out, seq)
    return bytes(out)


def decode(data: bytes) -> list[Checkpoint | None]:
    """The entries of a vector (index = slot), of either version. Raises ``ValueError`` for
    anything malformed. An entry whose seq is beyond :data:`~streamlease.seqs.MAX_SEQ` (an
    older worker accepted any seq) reads as a free slot: no stream may resume there."""
    if not data:
        return []
    version = data[0]
    if version not in (FORMAT_VERSION, UNTAGGED_VERSION):
        raise ValueError(f"unknown checkpoint vector version {version}")
    tagged = version == FORMAT_VERSION
    entries: list[Checkpoint | None] = []
    pos = 1
    while pos < len(data):
        epoch, pos = _get_varint(data, pos)
        if epoch == 0:
            entries.append(None)
            continue
        tag = None
        if tagged:
            if pos + TAG_BYTES > len(data):
                raise ValueError("truncated tag in checkpoint vector")
            tag = int.from_bytes(data[pos : pos + TAG_BYTES], "big")
            pos += TAG_BYTES
        seq, pos = _get_varint(data, pos)
        entries.append(Checkpoint(epoch, seq, tag) if seq <= MAX_SEQ else None)
    return entries


def entry_at(data: bytes | None, slot: int) -> Checkpoint | None:
    """The entry of ``slot`` in the vector ``data`` (None: free, absent or unreadable)."""
    if not data or slot < 0:
        return None
    try:
        entries = decode(data)
    except ValueError:
        return None
    return entries[slot] if slot < len(entries) else None


def _put_varint(out: bytearray, value: int) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _get_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or oversized varint in checkpoint vector")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
