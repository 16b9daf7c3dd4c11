"""The checkpoint vector a session renewal carries: ``(epoch, last_seq)`` of every held stream.

A session's streams are numbered by *slot* (a small integer stored on the stream item at
acquire, :attr:`~streamlease.schema.StreamAttr.LEASE_SLOT`); the vector holds, per slot, the
epoch the stream is held at and the last seq its sink acknowledged, or nothing for a free slot.
It is binary to keep the worker item small (a worker at 100 streams stays well under 1 KB):

- one version byte (:data:`FORMAT_VERSION`);
- then per slot, in slot order: ``varint(epoch)``, followed by ``varint(last_seq)`` when the
  epoch is not 0 (a free slot is the single byte 0);
- trailing free slots are left out.

Varints are unsigned LEB128. A takeover merges the vector into the stream item
(:func:`streamlease.rules.resume_seq`): an entry counts only for the epoch it names, so an entry
left over from an earlier holding of the slot can never be applied to a later one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

FORMAT_VERSION: Final = 1
MAX_SLOT_BYTES: Final = 20
"""Worst case of one slot: two 64-bit varints (the item-size bound of a session)."""

Checkpoint = tuple[int, int]
"""``(epoch, last_seq)`` of one held stream."""


def encode(entries: Sequence[Checkpoint | None]) -> bytes:
    """The vector of ``entries`` (index = slot). Raises ``ValueError`` for a negative number or
    an epoch of 0 (epochs start at 1)."""
    out = bytearray((FORMAT_VERSION,))
    last = len(entries)
    while last and entries[last - 1] is None:
        last -= 1
    for entry in entries[:last]:
        if entry is None:
            out.append(0)
            continue
        epoch, seq = entry
        if epoch <= 0 or seq < 0:
            raise ValueError(f"invalid checkpoint {entry!r}")
        _put_varint(out, epoch)
        _put_varint(out, seq)
    return bytes(out)


def decode(data: bytes) -> list[Checkpoint | None]:
    """The entries of a vector (index = slot). Raises ``ValueError`` for anything malformed."""
    if not data:
        return []
    if data[0] != FORMAT_VERSION:
        raise ValueError(f"unknown checkpoint vector version {data[0]}")
    entries: list[Checkpoint | None] = []
    pos = 1
    while pos < len(data):
        epoch, pos = _get_varint(data, pos)
        if epoch == 0:
            entries.append(None)
            continue
        seq, pos = _get_varint(data, pos)
        entries.append((epoch, seq))
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
