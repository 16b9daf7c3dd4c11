"""What every sink shares: the record, the interface and the one wire format of a record."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, Protocol, runtime_checkable

from streamlease.schema import PayloadEncoding, SinkField

try:
    import orjson

    _dumps: Callable[[str], bytes] = orjson.dumps
except ImportError:  # pragma: no cover - orjson ships in the worker image

    def _dumps(value: str) -> bytes:
        return json.dumps(value).encode()


class SinkRecord(NamedTuple):
    """One delivered upstream message. Field names are :class:`SinkField`'s (a test checks it).

    ``payload`` is the upstream frame as received: the UTF-8 bytes of one JSON document
    (``payload_encoding`` ``json``), of any text (``text``), or a binary frame's bytes
    (``base64``). ``epoch`` is the lease epoch under which it was delivered (consumers may drop
    older epochs).
    """

    stream_id: str
    epoch: int
    seq: int
    received_at_ms: int
    payload: bytes
    worker_id: str
    payload_encoding: str = PayloadEncoding.JSON


class Deadline(Protocol):
    """The fencing deadline of the holder whose records a sink write carries."""

    def remaining_seconds(self) -> float:
        """Seconds before the deadline (0 or less: passed). It may move later, never earlier
        while the holder still delivers."""
        ...


class NoDeadline:
    """A deadline that never passes (tools and tests that write outside any lease)."""

    def remaining_seconds(self) -> float:
        """Always infinite."""
        return float("inf")


@runtime_checkable
class Sink(Protocol):
    """Where delivered messages go. One sink per worker process, shared by every stream.

    ``write`` returns once the records are stored (at least once) and raises
    :class:`~streamlease.errors.SinkError` when the sink gave up after its own retries; records of
    one call are stored in order unless a retry reorders them (consumers order by
    ``(epoch, seq)``). Nothing may be *sent* once ``deadline`` has passed — not a first attempt,
    not a retry (a send already under way may finish): then ``write`` raises
    :class:`~streamlease.errors.SinkDeadlinePassed`. Either error says in ``unsent`` which
    records were not stored, when the sink knows. ``close`` flushes what was accepted and
    releases resources; ``write`` after ``close`` raises ``SinkError``.
    """

    async def write(self, records: Sequence[SinkRecord], deadline: Deadline) -> None: ...

    async def close(self) -> None: ...


_TEMPLATE: Final = (
    f'{{"{SinkField.STREAM_ID}":%s,"{SinkField.EPOCH}":%d,"{SinkField.SEQ}":%d,'
    f'"{SinkField.RECEIVED_AT_MS}":%d,"{SinkField.WORKER_ID}":%s,'
    f'"{SinkField.PAYLOAD_ENCODING}":"%s","{SinkField.PAYLOAD}":%s}}'
).encode()


def encode_record(record: SinkRecord) -> bytes:
    """The record as one line of compact JSON (no newline), ``payload`` embedded as JSON (a
    JSON document as itself, text as a JSON string, binary as a base64 string).

    Raw line breaks in a JSON document can only be whitespace between tokens, so they are
    replaced by spaces: the result is always a single line.
    """
    payload = record.payload
    encoding = record.payload_encoding
    if encoding == PayloadEncoding.JSON:
        if b"\n" in payload or b"\r" in payload:
            payload = payload.replace(b"\n", b" ").replace(b"\r", b" ")
    elif encoding == PayloadEncoding.TEXT:
        payload = _dumps(payload.decode("utf-8", "replace"))
    else:
        payload = b'"' + base64.b64encode(payload) + b'"'
    return _TEMPLATE % (
        _dumps(record.stream_id),
        record.epoch,
        record.seq,
        record.received_at_ms,
        _dumps(record.worker_id),
        encoding.encode(),
        payload,
    )
