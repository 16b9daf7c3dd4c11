"""What the Kinesis sink writes, and how a consumer reads it back.

With aggregation on (the default), each Kinesis record is a KPL aggregated record
(:mod:`streamlease.kpl`) of many delivered messages. Every message is one user record whose
partition key is its stream id, so the KCL and AWS's deaggregation modules hand a consumer each
stream's messages in order, and whose data is one ``StreamMessage``::

    message StreamMessage {
      uint64 epoch            = 1;   // the lease epoch it was delivered under
      uint64 seq              = 2;
      uint64 received_at_ms   = 3;   // when the worker received it, epoch ms
      Encoding encoding       = 4;   // JSON = 0 (left out), TEXT = 1, BINARY = 2
      bytes payload           = 5;   // the frame as received: no base64, no escaping
    }

The stream id is the partition key (written once per aggregated record, however many of its
messages it carries) and the worker id is the aggregated record's ``producer``: neither is
repeated per message. A consumer in another language decodes ``StreamMessage`` with any protobuf
library from the schema above.

With aggregation off, each message is one Kinesis record of one line of JSON
(``worker.sinks.base.encode_record``, every field by name). :func:`read_record` reads either.

**Where a seq comes from** (:func:`seq_from_upstream`, the one statement of the rule): a stream
whose profile names a seq path delivers only JSON documents and each message's seq is the
upstream's own (``payload_encoding`` ``json``); a ``seq: none`` stream's messages are numbered
by the worker, per holding, from its checkpoint on, and are ``text`` or ``base64``. So an
upstream seq names the same content under every epoch, while a worker-numbered seq is unique
only within one epoch: a new holding may number content again, or skip some (architecture §4,
"Fencing"; the consumer's rule in :mod:`streamlease.consumer`).
"""

from __future__ import annotations

import base64
import json
from typing import Final, NamedTuple

from streamlease.kpl import AggregationError, deaggregate, message_fields, varint
from streamlease.sink_fields import PayloadEncoding, SinkField

_CODES: Final = {PayloadEncoding.JSON: 0, PayloadEncoding.TEXT: 1, PayloadEncoding.BASE64: 2}
"""``StreamMessage.encoding`` of each payload encoding; ``base64`` (a binary frame) is carried
as its raw bytes."""
_ENCODINGS: Final = {code: encoding for encoding, code in _CODES.items()}
_EPOCH_TAG: Final = b"\x08"
_SEQ_TAG: Final = b"\x10"
_RECEIVED_TAG: Final = b"\x18"
_ENCODING_TAG: Final = b"\x20"
_PAYLOAD_TAG: Final = b"\x2a"


class UnknownEncoding(AggregationError):
    """A ``StreamMessage`` whose encoding code this reader does not know (a newer writer's)."""


class StreamMessage(NamedTuple):
    """One delivered message as a consumer reads it. ``payload_encoding`` says what
    ``payload`` is: a JSON document's bytes, UTF-8 text, or a binary frame (``base64``, here
    the raw bytes)."""

    stream_id: str
    epoch: int
    seq: int
    received_at_ms: int
    payload: bytes
    payload_encoding: str
    worker_id: str | None


def seq_from_upstream(payload_encoding: str) -> bool:
    """True when a message of ``payload_encoding`` carries the upstream's own seq (``json``:
    the stream's profile names a seq path), False when the worker numbered it (``text`` or
    ``base64``: a ``seq: none`` stream, numbered per holding from the checkpoint on)."""
    return payload_encoding == PayloadEncoding.JSON


def epoch_prefix(epoch: int) -> bytes:
    """The first field of every message of one epoch: computed once per batch."""
    return _EPOCH_TAG + varint(epoch)


def encode_message(
    epoch_field: bytes,
    seq: int,
    received_at_ms: int,
    payload: bytes | bytearray,
    payload_encoding: str,
) -> bytes:
    """One ``StreamMessage``; ``epoch_field`` is :func:`epoch_prefix` of its epoch. Raises
    ``KeyError`` for an unknown payload encoding."""
    code = _CODES[PayloadEncoding(payload_encoding)]
    return b"".join(
        (
            epoch_field,
            _SEQ_TAG,
            varint(seq),
            _RECEIVED_TAG,
            varint(received_at_ms),
            _ENCODING_TAG + varint(code) if code else b"",
            _PAYLOAD_TAG,
            varint(len(payload)),
            payload,
        )
    )


def decode_message(stream_id: str, data: bytes, worker_id: str | None = None) -> StreamMessage:
    """The ``StreamMessage`` in ``data`` (one user record's data). Raises
    :class:`UnknownEncoding` for an encoding code it does not know and
    :class:`~streamlease.kpl.AggregationError` when it does not parse."""
    values = dict(message_fields(data))
    epoch, seq, received = values.get(1, 0), values.get(2, 0), values.get(3, 0)
    code, payload = values.get(4, 0), values.get(5, b"")
    if not (
        isinstance(epoch, int)
        and isinstance(seq, int)
        and isinstance(received, int)
        and isinstance(code, int)
        and isinstance(payload, bytes)
    ):
        raise AggregationError("a stream message field has the wrong wire type")
    if code not in _ENCODINGS:
        raise UnknownEncoding(f"a stream message has an unknown payload encoding {code}")
    return StreamMessage(stream_id, epoch, seq, received, payload, _ENCODINGS[code], worker_id)


def read_record(data: bytes, partition_key: str) -> list[StreamMessage]:
    """Every message of one Kinesis record of the sink, in order, aggregated or not. Raises
    :class:`~streamlease.kpl.AggregationError` for an aggregated record that does not parse;
    a plain record must be the JSON line the sink writes with aggregation off
    (``ValueError`` if not)."""
    unpacked = deaggregate(data, partition_key)
    if not unpacked.aggregated:
        return [_from_json(data)]
    return [
        decode_message(record.partition_key, record.data, unpacked.producer)
        for record in unpacked.records
    ]


def _from_json(data: bytes) -> StreamMessage:
    body = json.loads(data)
    encoding = body[SinkField.PAYLOAD_ENCODING]
    raw = body[SinkField.PAYLOAD]
    if encoding == PayloadEncoding.JSON:
        payload = json.dumps(raw, separators=(",", ":")).encode()
    elif encoding == PayloadEncoding.TEXT:
        payload = raw.encode()
    else:
        payload = base64.b64decode(raw)
    return StreamMessage(
        body[SinkField.STREAM_ID],
        body[SinkField.EPOCH],
        body[SinkField.SEQ],
        body[SinkField.RECEIVED_AT_MS],
        payload,
        encoding,
        body.get(SinkField.WORKER_ID),
    )
