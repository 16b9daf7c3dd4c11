"""The KPL aggregation format: many user records, each with its own partition key, in one
Kinesis record.

This is the format the Kinesis Producer Library writes and that the Kinesis Client Library and
AWS's deaggregation modules (``aws-kinesis-agg`` for Python, Node.js, Java, Go) read back into
user records, so a consumer sees every user record with its own partition key, in order::

    F3 89 9A C2                    magic
    AggregatedRecord (protobuf)    the records
    MD5 of the protobuf bytes      16 bytes

    message AggregatedRecord {
      repeated string partition_key_table     = 1;
      repeated string explicit_hash_key_table = 2;
      repeated Record records                 = 3;
      optional string producer                = 15;  // ours: readers skip unknown fields
    }
    message Record {
      required uint64 partition_key_index     = 1;
      optional uint64 explicit_hash_key_index = 2;
      required bytes  data                    = 3;
      repeated Tag    tags                    = 4;
    }

A partition key is written once per aggregated record however many of its user records carry
it. ``producer`` (field 15) names who wrote the record once for all of them; KPL readers ignore
it as protobuf readers ignore any field they do not know. The encoder is hand-written: the schema
is three fields deep, and the per-record path (an index varint, a length, the bytes) is the
sink's hot loop. Everything here is pure: bytes in, bytes out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Final, NamedTuple

from streamlease.errors import StreamleaseError

MAGIC: Final = b"\xf3\x89\x9a\xc2"
DIGEST_BYTES: Final = 16
OVERHEAD_BYTES: Final = len(MAGIC) + DIGEST_BYTES
"""What an aggregated record adds around its protobuf bytes."""

_PARTITION_KEY_TABLE: Final = 1
_EXPLICIT_HASH_KEY_TABLE: Final = 2
_RECORDS: Final = 3
_PRODUCER: Final = 15
_RECORD_KEY_INDEX: Final = 1
_RECORD_HASH_KEY_INDEX: Final = 2
_RECORD_DATA: Final = 3
_VARINT: Final = 0
_FIXED64: Final = 1
_LENGTH: Final = 2
_FIXED32: Final = 5

_SMALL: Final = 1 << 14
_VARINTS: Final = tuple(
    bytes([n]) if n < 0x80 else bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(_SMALL)
)
"""Varints of 0 … 16,383 (one or two bytes), computed once: lengths and indexes are mostly
these."""


class AggregationError(StreamleaseError):
    """Bytes that claim to be an aggregated record but are not one (bad digest, bad protobuf)."""


class DigestMismatch(AggregationError):
    """An aggregated record whose MD5 does not match its contents: corrupted, or cut short (a
    cut removes the real digest, so the last 16 bytes left are compared instead)."""


def varint(value: int) -> bytes:
    """``value`` (0 or more) as a protobuf base-128 varint."""
    if value < _SMALL:
        return _VARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


_KEY_TAG: Final = _field(_PARTITION_KEY_TABLE, _LENGTH)
_RECORD_TAG: Final = _field(_RECORDS, _LENGTH)
_PRODUCER_TAG: Final = _field(_PRODUCER, _LENGTH)
_INDEX_TAG: Final = _field(_RECORD_KEY_INDEX, _VARINT)
_DATA_TAG: Final = _field(_RECORD_DATA, _LENGTH)


def hash_key(partition_key: str) -> int:
    """The 128-bit hash key Kinesis maps ``partition_key`` to (MD5, big-endian): the shard
    whose hash key range holds it stores the record."""
    return int.from_bytes(hashlib.md5(partition_key.encode()).digest(), "big")  # noqa: S324 - Kinesis's own mapping, not security


class Aggregator:
    """One aggregated record being built: :meth:`add` user records, then :meth:`encode`.

    :attr:`size` is always the size :meth:`encode` would return now, so a caller can stop
    adding before a limit (:meth:`size_with` says what one more record would make it).
    """

    __slots__ = ("_chunks", "_keys", "_producer", "count", "size")

    def __init__(self, producer: str = "") -> None:
        self._keys: dict[str, int] = {}
        self._chunks: list[bytes] = []
        self._producer = b""
        if producer:
            raw = producer.encode()
            self._producer = _PRODUCER_TAG + varint(len(raw)) + raw
        self.count = 0
        """User records added."""
        self.size = OVERHEAD_BYTES + len(self._producer)
        """Bytes of the encoded aggregated record."""

    def size_with(self, partition_key: str, data_bytes: int) -> int:
        """:attr:`size` after adding one user record of ``data_bytes`` bytes under
        ``partition_key``."""
        index = self._keys.get(partition_key)
        grow = 0
        if index is None:
            index = len(self._keys)
            raw = len(partition_key.encode())
            grow = 1 + len(varint(raw)) + raw
        inner = 1 + len(varint(index)) + 1 + len(varint(data_bytes)) + data_bytes
        return self.size + grow + 1 + len(varint(inner)) + inner

    def add(self, partition_key: str, data: bytes) -> None:
        """Append one user record: ``data`` under ``partition_key``."""
        index = self._keys.get(partition_key)
        if index is None:
            index = self._keys[partition_key] = len(self._keys)
            raw = partition_key.encode()
            self.size += 1 + len(varint(len(raw))) + len(raw)
        record = _INDEX_TAG + varint(index) + _DATA_TAG + varint(len(data)) + data
        chunk = _RECORD_TAG + varint(len(record)) + record
        self._chunks.append(chunk)
        self.size += len(chunk)
        self.count += 1

    def encode(self) -> bytes:
        """The aggregated record: magic, protobuf (keys, records, producer), MD5."""
        keys = []
        for key in self._keys:
            raw = key.encode()
            keys.append(_KEY_TAG + varint(len(raw)) + raw)
        body = b"".join((*keys, *self._chunks, self._producer))
        return MAGIC + body + hashlib.md5(body).digest()  # noqa: S324 - the format's checksum


class UserRecord(NamedTuple):
    """One user record of an aggregated record (or the whole record when not aggregated)."""

    partition_key: str
    data: bytes
    explicit_hash_key: str | None = None


class Deaggregated(NamedTuple):
    """What one Kinesis record holds: its user records and, if written, the producer."""

    records: list[UserRecord]
    producer: str | None
    aggregated: bool


def deaggregate(data: bytes, partition_key: str) -> Deaggregated:
    """The user records of one Kinesis record (``data`` and its ``partition_key``), in order.

    Data that does not start with the magic bytes is one plain record, returned as it is (as the
    KPL readers do). Raises :class:`DigestMismatch` (an :class:`AggregationError`) when the digest
    does not match, :class:`AggregationError` when the protobuf does not parse.
    """
    if not data.startswith(MAGIC) or len(data) < OVERHEAD_BYTES:
        return Deaggregated([UserRecord(partition_key, data)], None, aggregated=False)
    body, digest = data[len(MAGIC) : -DIGEST_BYTES], data[-DIGEST_BYTES:]
    if hashlib.md5(body).digest() != digest:  # noqa: S324 - the format's checksum
        raise DigestMismatch("aggregated record's MD5 does not match its contents")
    keys: list[str] = []
    hash_keys: list[str] = []
    raw_records: list[bytes] = []
    producer: str | None = None
    for number, value in message_fields(body):
        if number == _PARTITION_KEY_TABLE:
            keys.append(_text(value))
        elif number == _EXPLICIT_HASH_KEY_TABLE:
            hash_keys.append(_text(value))
        elif number == _RECORDS:
            raw_records.append(_bytes(value))
        elif number == _PRODUCER:
            producer = _text(value)
    records = []
    for raw in raw_records:
        key_index, hash_index, payload = None, None, None
        for number, value in message_fields(raw):
            if number == _RECORD_KEY_INDEX:
                key_index = _int(value)
            elif number == _RECORD_HASH_KEY_INDEX:
                hash_index = _int(value)
            elif number == _RECORD_DATA:
                payload = _bytes(value)
        if key_index is None or payload is None or key_index >= len(keys):
            raise AggregationError("a user record lacks its partition key or its data")
        if hash_index is not None and hash_index >= len(hash_keys):
            raise AggregationError("a user record's explicit hash key index is out of range")
        explicit = hash_keys[hash_index] if hash_index is not None else None
        records.append(UserRecord(keys[key_index], payload, explicit))
    return Deaggregated(records, producer, aggregated=True)


def message_fields(buffer: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of every field of one protobuf message; varints as ``int``,
    length-delimited fields as ``bytes``, fixed-width ones skipped. Raises
    :class:`AggregationError` when the bytes are not a protobuf message."""
    position, end = 0, len(buffer)
    while position < end:
        tag, position = read_varint(buffer, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == _VARINT:
            value, position = read_varint(buffer, position)
            yield number, value
        elif wire_type == _LENGTH:
            length, position = read_varint(buffer, position)
            if position + length > end:
                raise AggregationError("a protobuf field runs past the end of its message")
            yield number, buffer[position : position + length]
            position += length
        elif wire_type in (_FIXED64, _FIXED32):
            position += 8 if wire_type == _FIXED64 else 4
        else:
            raise AggregationError(f"protobuf wire type {wire_type} is not supported")
    if position != end:
        raise AggregationError("a protobuf field runs past the end of its message")


def read_varint(buffer: bytes, position: int) -> tuple[int, int]:
    """The protobuf varint at ``position`` of ``buffer`` and the position after it. Raises
    :class:`AggregationError` when it is cut short or longer than 64 bits."""
    result, shift = 0, 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise AggregationError("a protobuf varint is cut short or too long")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7


def _int(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise AggregationError("a protobuf field has the wrong wire type")
    return value


def _bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise AggregationError("a protobuf field has the wrong wire type")
    return value


def _text(value: int | bytes) -> str:
    try:
        return _bytes(value).decode()
    except UnicodeDecodeError:
        raise AggregationError("a protobuf string is not UTF-8") from None
