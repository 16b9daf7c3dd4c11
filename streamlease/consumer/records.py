"""What the consumer reads (Kinesis records, from GetRecords or a Lambda event) and what it
hands on: messages, and problems with records that are not what the sink writes (pure).

A Kinesis record of the sink is a KPL aggregated record of ``StreamMessage`` user records, or
one JSON line (:mod:`streamlease.kinesis_records`). Anything else — a record another producer
put on the stream, a corrupt or cut aggregate, a message of an encoding this reader does not
know — is neither dropped in silence nor allowed to stop the reader: each becomes a
:class:`ReadProblem` naming the shard, the record's sequence number, a :class:`ProblemKind` and
a short detail. A detail never quotes the record's bytes (they may be anyone's data).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from streamlease.kinesis_records import StreamMessage, UnknownEncoding, decode_message
from streamlease.kpl import (
    MAGIC,
    OVERHEAD_BYTES,
    AggregationError,
    DigestMismatch,
    deaggregate,
    hash_key,
)
from streamlease.seqs import MAX_SEQ
from streamlease.sink_fields import PayloadEncoding, SinkField

_ENCODINGS = frozenset(PayloadEncoding)


class SourceRecord(NamedTuple):
    """One Kinesis record as read: its shard, sequence number, partition key and data, and when
    Kinesis stored it (epoch ms; None when unknown)."""

    shard_id: str
    sequence_number: str
    partition_key: str
    data: bytes
    arrival_ms: int | None = None

    @classmethod
    def from_get_records(cls, shard_id: str, record: Mapping[str, Any]) -> SourceRecord:
        """An entry of a ``GetRecords`` answer's ``Records`` (``Data`` is bytes, the arrival
        time a ``datetime``). Raises ``KeyError`` when a field GetRecords always sends is
        missing."""
        arrival = record.get("ApproximateArrivalTimestamp")
        return cls(
            shard_id,
            record["SequenceNumber"],
            record["PartitionKey"],
            bytes(record["Data"]),
            int(arrival.timestamp() * 1000) if isinstance(arrival, datetime) else None,
        )

    @classmethod
    def from_lambda(cls, record: Mapping[str, Any]) -> SourceRecord:
        """A record of a Lambda Kinesis event: ``kinesis.data`` is base64, the shard id is the
        part of ``eventID`` (``shardId-000000000006:4954…``) before the colon, the arrival time
        is in seconds. Raises ``KeyError`` for a missing field and ``ValueError`` for data that
        is not base64 (neither happens in an event Lambda made)."""
        kinesis = record["kinesis"]
        arrival = kinesis.get("approximateArrivalTimestamp")
        return cls(
            str(record["eventID"]).split(":", 1)[0],
            kinesis["sequenceNumber"],
            kinesis["partitionKey"],
            base64.b64decode(kinesis["data"], validate=True),
            int(float(arrival) * 1000) if arrival is not None else None,
        )


class ConsumedMessage(NamedTuple):
    """One message the consumer emits: a ``StreamMessage`` and the Kinesis record it came in.
    ``payload`` is the frame's bytes (a JSON document's UTF-8, text's UTF-8, or a binary
    frame); ``received_at_ms``: when the worker received it, epoch ms; ``arrival_ms``: when
    Kinesis stored its record, epoch ms (None: unknown)."""

    stream_id: str
    epoch: int
    seq: int
    received_at_ms: int
    payload: bytes
    payload_encoding: str
    worker_id: str | None
    shard_id: str
    sequence_number: str
    arrival_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The message as one JSON-able dict, with the sink record's field names: the payload
        inline as a JSON document (``json``), a string (``text``) or base64 (``base64``)."""
        payload: Any
        if self.payload_encoding == PayloadEncoding.JSON:
            payload = json.loads(self.payload)
        elif self.payload_encoding == PayloadEncoding.TEXT:
            payload = self.payload.decode()
        else:
            payload = base64.b64encode(self.payload).decode()
        return {
            SinkField.STREAM_ID: self.stream_id,
            SinkField.EPOCH: self.epoch,
            SinkField.SEQ: self.seq,
            SinkField.RECEIVED_AT_MS: self.received_at_ms,
            SinkField.PAYLOAD: payload,
            SinkField.PAYLOAD_ENCODING: self.payload_encoding,
        }


class ProblemKind(StrEnum):
    """What was wrong with a record (:attr:`ReadProblem.kind`)."""

    NOT_OURS = "not_ours"
    """Neither a KPL aggregated record nor a JSON line of the sink."""
    TRUNCATED = "truncated"
    """Starts as an aggregated record but is shorter than its frame (magic and digest)."""
    DIGEST_MISMATCH = "digest_mismatch"
    """An aggregated record whose MD5 does not match: corrupt, or cut short anywhere after its
    first 20 bytes (which removes the real digest)."""
    BAD_AGGREGATE = "bad_aggregate"
    """An aggregated record with a matching digest whose protobuf does not parse."""
    BAD_MESSAGE = "bad_message"
    """A user record or JSON line of ours that lacks a field, has one of the wrong type, or a
    seq or epoch outside 0 .. 2^63 − 1."""
    UNKNOWN_ENCODING = "unknown_encoding"
    """A message whose payload encoding this reader does not know (a newer writer's)."""
    BAD_PAYLOAD = "bad_payload"
    """A ``json`` payload that is not a JSON document, or a ``text`` one that is not UTF-8."""


class ReadProblem(NamedTuple):
    """A record (or one user record of it) the consumer could not read: where it is, what
    kind of problem (a :class:`ProblemKind`) and a short detail that never quotes its data."""

    shard_id: str
    sequence_number: str
    kind: str
    detail: str


class _Unreadable(Exception):
    def __init__(self, kind: ProblemKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


HashRange = tuple[int, int]
"""A shard's hash key range, both ends included (``ListShards``' ``HashKeyRange``)."""


def listed_shard(entry: Mapping[str, Any]) -> tuple[tuple[str, ...], HashRange]:
    """A ``ListShards`` entry's lineage and range: the shards it was split or merged from, and
    its hash key range."""
    parents = (entry.get("ParentShardId"), entry.get("AdjacentParentShardId"))
    keys = entry["HashKeyRange"]
    return (
        tuple(p for p in parents if p),
        (int(keys["StartingHashKey"]), int(keys["EndingHashKey"])),
    )


def read_source(
    record: SourceRecord, hash_range: HashRange | None = None
) -> tuple[list[StreamMessage], list[ReadProblem], list[str]]:
    """Every message of ``record``, in order; a problem for each part that could not be read: a
    whole record (not ours, cut, corrupt) or one user record of an aggregate (the others are
    still read); and the stream ids of the user records left out because their hash key is
    outside ``hash_range`` (the shard's: None, all kept). Such a user record rode in an
    aggregate packed for the shard's parent before a reshard and stored here by its first
    record's key; the sink wrote it again on its own shard (the KCL's rule, which the sink
    follows: it counts as stored only what the landing shard covers). Never raises for what
    the record holds."""
    problems: list[ReadProblem] = []

    def problem(kind: ProblemKind, detail: str) -> None:
        problems.append(ReadProblem(record.shard_id, record.sequence_number, kind, detail))

    data = record.data
    if data.startswith(MAGIC) and len(data) < OVERHEAD_BYTES:
        problem(ProblemKind.TRUNCATED, f"{len(data)} bytes, shorter than an aggregate's frame")
        return [], problems, []
    try:
        unpacked = deaggregate(data, record.partition_key)
    except DigestMismatch:
        problem(ProblemKind.DIGEST_MISMATCH, "aggregated record's MD5 does not match")
        return [], problems, []
    except AggregationError as exc:
        problem(ProblemKind.BAD_AGGREGATE, str(exc))
        return [], problems, []
    if not unpacked.aggregated:  # routed by its own partition key: always its shard's
        try:
            return [_checked(_from_json(data))], problems, []
        except _Unreadable as exc:
            problem(exc.kind, exc.detail)
            return [], problems, []
    messages: list[StreamMessage] = []
    outside: list[str] = []
    total = len(unpacked.records)
    for index, user in enumerate(unpacked.records):
        if hash_range is not None:
            key = int(user.explicit_hash_key or hash_key(user.partition_key))
            if not hash_range[0] <= key <= hash_range[1]:
                outside.append(user.partition_key)
                continue
        try:
            message = decode_message(user.partition_key, user.data, unpacked.producer)
            messages.append(_checked(message))
        except UnknownEncoding as exc:
            problem(ProblemKind.UNKNOWN_ENCODING, f"user record {index + 1} of {total}: {exc}")
        except AggregationError as exc:
            problem(ProblemKind.BAD_MESSAGE, f"user record {index + 1} of {total}: {exc}")
        except _Unreadable as exc:
            problem(exc.kind, f"user record {index + 1} of {total}: {exc.detail}")
    return messages, problems, outside


def _checked(message: StreamMessage) -> StreamMessage:
    """``message`` if every field is in range and its payload is what its encoding says."""
    if not message.stream_id:
        raise _Unreadable(ProblemKind.BAD_MESSAGE, "empty stream id")
    for name, value in ((SinkField.EPOCH, message.epoch), (SinkField.SEQ, message.seq)):
        if not 0 <= value <= MAX_SEQ:
            raise _Unreadable(ProblemKind.BAD_MESSAGE, f"{name} outside 0 .. 2^63-1")
    try:
        if message.payload_encoding == PayloadEncoding.JSON:
            json.loads(message.payload)
        elif message.payload_encoding == PayloadEncoding.TEXT:
            message.payload.decode()
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; deep nesting
        raise _Unreadable(
            ProblemKind.BAD_PAYLOAD, f"payload is not valid {message.payload_encoding}"
        ) from None
    return message


def _from_json(data: bytes) -> StreamMessage:
    """The JSON line the sink writes with aggregation off (``worker.sinks.base.encode_record``),
    read strictly: every field present with its type, a known payload encoding."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        raise _Unreadable(ProblemKind.NOT_OURS, "neither KPL-aggregated nor JSON") from None
    if not isinstance(body, dict) or SinkField.STREAM_ID not in body:
        raise _Unreadable(ProblemKind.NOT_OURS, "JSON, but not a sink record")
    for name in (SinkField.EPOCH, SinkField.SEQ, SinkField.RECEIVED_AT_MS):
        value = body.get(name)
        if type(value) is not int:
            raise _Unreadable(ProblemKind.BAD_MESSAGE, f"{name} missing or not an integer")
    stream_id, worker_id = body[SinkField.STREAM_ID], body.get(SinkField.WORKER_ID)
    if not isinstance(stream_id, str) or not (worker_id is None or isinstance(worker_id, str)):
        raise _Unreadable(ProblemKind.BAD_MESSAGE, "stream_id or worker_id not a string")
    encoding = body.get(SinkField.PAYLOAD_ENCODING)
    if not isinstance(encoding, str) or encoding not in _ENCODINGS:
        raise _Unreadable(ProblemKind.UNKNOWN_ENCODING, "payload_encoding not json, text, base64")
    if SinkField.PAYLOAD not in body:
        raise _Unreadable(ProblemKind.BAD_MESSAGE, "payload missing")
    payload = _payload(body[SinkField.PAYLOAD], encoding)
    return StreamMessage(
        stream_id,
        body[SinkField.EPOCH],
        body[SinkField.SEQ],
        body[SinkField.RECEIVED_AT_MS],
        payload,
        encoding,
        worker_id,
    )


def _payload(raw: Any, encoding: str) -> bytes:
    """A JSON line's ``payload`` as the frame's bytes: a JSON document re-serialised compactly
    (its characters kept, not escaped), text as UTF-8, base64 decoded."""
    try:
        if encoding == PayloadEncoding.JSON:
            return json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode()
        if not isinstance(raw, str):
            raise _Unreadable(ProblemKind.BAD_PAYLOAD, f"a {encoding} payload that is not a string")
        if encoding == PayloadEncoding.TEXT:
            return raw.encode()
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, UnicodeEncodeError):  # bad base64; a lone surrogate in a string
        raise _Unreadable(ProblemKind.BAD_PAYLOAD, f"payload is not valid {encoding}") from None
