"""The fields of every record a sink writes, and how a record holds its payload."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class SinkField:
    """Field names of every record a sink writes."""

    STREAM_ID: Final = "stream_id"
    EPOCH: Final = "epoch"
    SEQ: Final = "seq"
    RECEIVED_AT_MS: Final = "received_at_ms"
    PAYLOAD: Final = "payload"
    PAYLOAD_ENCODING: Final = "payload_encoding"
    """How ``payload`` holds the frame: ``json`` (the JSON document itself), ``text`` (a text
    frame as a JSON string) or ``base64`` (a binary frame)."""
    WORKER_ID: Final = "worker_id"
    WRITTEN_AT_MS: Final = "written_at_ms"
    """File sink: wall-clock epoch ms at which the record's batch was appended (taken in the
    sink's thread right after its last deadline check). Stamped by the sink, so not a field of
    the records handed to it; the invariant checker judges overlaps by it."""


SINK_STAMPED_FIELDS: Final = frozenset({SinkField.WRITTEN_AT_MS})
"""Fields a sink adds to what it was handed."""


class PayloadEncoding(StrEnum):
    """Values of :attr:`SinkField.PAYLOAD_ENCODING`."""

    JSON = "json"
    TEXT = "text"
    BASE64 = "base64"
