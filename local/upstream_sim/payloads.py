"""What a stream's messages contain and how they are framed: pure functions, so checkers can
import them and tell exactly what the simulator sent.

Where the payload (:func:`payload_for` of the stream id and the message number) lands, per feed
mode (see :func:`payload_path`):

- default and ``seq_field=<path>`` not through ``data``: at ``data``;
- ``seq_field=data.<rest>``: ``data`` becomes an object holding the seq at ``<rest>`` and the
  payload at ``data.d``;
- ``noseq=1``: at ``data`` (and no seq anywhere);
- ``binary=1``: the whole frame is :func:`binary_payload_for`.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from typing import Any, Final

SEQ_FIELD: Final = "seq"
"""Where the seq is by default."""
DATA_FIELD: Final = "data"
TS_FIELD: Final = "ts"
NESTED_PAYLOAD_KEY: Final = "d"
"""Key of the payload inside ``data`` when the seq path goes through ``data``."""
BINARY_MARKER: Final = b"\xff\xfe"
"""Bytes after the seq in a binary message: never valid UTF-8, so a text decoder fails on them."""
PAD_CHARACTER: Final = b"."
"""What the ``pad`` knob appends to ``data``: one byte in JSON and UTF-8 alike."""
SUBSCRIBE_TYPE: Final = "subscribe"
SUBSCRIBED_TYPE: Final = "subscribed"
SUBSCRIBE_FROM_KEY: Final = "from"
SUBSCRIBE_AFTER_KEY: Final = "after"


def _text_frame(text: bytes) -> bytes:
    """An unmasked, final text frame of up to 125 bytes (server to client)."""
    assert len(text) <= 125
    return bytes((0x81, len(text))) + text


GARBAGE_FRAMES: Final = (
    _text_frame(b"not json at all"),
    _text_frame(b'{"no_seq":true}'),
    _text_frame(b'{"seq":"7"}'),
    _text_frame(b"[1,2,3]"),
    b"\x82\x03\xff\xfe\x00",  # binary frame, not UTF-8
    _text_frame(b'{"seq":9223372036854775808}'),  # 2^63: one above what an int64 holds
    _text_frame(b'{"seq":1180591620717411303424}'),  # 2^70
    _text_frame(b'{"seq":1234567890123456789012345678901234567890}'),  # 40 digits
)
"""Malformed frames ``garbage_every`` sends, in turn: no JSON, no seq, a seq that is not a
number, not an object, binary, and seqs beyond the range a worker accepts
(:data:`streamlease.seqs.MAX_SEQ`)."""

_PATH_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_TEXT_OPCODE: Final = 0x81  # FIN + text
_BINARY_OPCODE: Final = 0x82  # FIN + binary


def payload_for(stream_id: str, seq: int) -> str:
    """The ``data`` of message ``seq`` of ``stream_id``: a pure function, for checkers."""
    return f"{stream_id}:{seq}:{mix(zlib.crc32(stream_id.encode()), seq):08x}"


def binary_payload_for(stream_id: str, seq: int) -> bytes:
    """The bytes of binary message ``seq`` of ``stream_id`` (``binary=1``): a pure function.

    Layout: ``seq`` as 8 bytes big-endian, :data:`BINARY_MARKER` (``b"\\xff\\xfe"``, not UTF-8),
    then the UTF-8 of :func:`payload_for`.
    """
    return struct.pack("!Q", seq) + BINARY_MARKER + payload_for(stream_id, seq).encode()


def mix(stream_hash: int, seq: int) -> int:
    """The per-message hash in :func:`payload_for` (``stream_hash`` is the id's CRC-32)."""
    return ((seq * 0x9E3779B1) ^ stream_hash) & 0xFFFFFFFF


def check_seq_field(path: str) -> None:
    """Raises ``ValueError`` unless ``path`` is a dotted path the seq can be placed at.

    Segments are letters, digits, ``_`` or ``-``; the path may not be or go through ``ts``, and
    may be neither ``data`` nor under ``data.d`` (where the payload goes).
    """
    segments = path.split(".")
    if not all(_PATH_SEGMENT.fullmatch(segment) for segment in segments):
        raise ValueError("seq_field must be a dotted path of letters, digits, '_' or '-'")
    if (
        segments[0] == TS_FIELD
        or segments == [DATA_FIELD]
        or segments[:2]
        == [
            DATA_FIELD,
            NESTED_PAYLOAD_KEY,
        ]
    ):
        raise ValueError("seq_field may not be ts, data or data.d (they hold ts and the payload)")


def payload_path(seq_field: str = SEQ_FIELD) -> str:
    """Dotted path of the payload in a text message whose seq is at ``seq_field``."""
    if seq_field.split(".")[0] == DATA_FIELD:
        return f"{DATA_FIELD}.{NESTED_PAYLOAD_KEY}"
    return DATA_FIELD


def text_message(
    stream_id: str, seq: int, ts_ms: int, *, seq_field: str = SEQ_FIELD, noseq: bool = False
) -> bytes:
    """The compact JSON body of text message ``seq``: the seq at ``seq_field`` (nowhere when
    ``noseq``), ``ts`` (epoch milliseconds) and the payload at :func:`payload_path`.

    Key order: the seq path's first key, ``ts``, then ``data`` (unless already placed), so the
    default is ``{"seq":n,"ts":ms,"data":"..."}``.
    """
    payload = payload_for(stream_id, seq)
    message: dict[str, Any] = {}
    if not noseq:
        *parents, leaf = seq_field.split(".")
        node = message
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = seq
    message[TS_FIELD] = ts_ms
    if noseq or payload_path(seq_field) == DATA_FIELD:
        message[DATA_FIELD] = payload
    else:
        message[DATA_FIELD][NESTED_PAYLOAD_KEY] = payload
    return json.dumps(message, separators=(",", ":")).encode()


def subscription_start(message: str | bytes, default: int) -> int | None:
    """Where a client message subscribes from, or ``None`` if it is not a subscription.

    A subscription is a text message holding a JSON object with ``"type": "subscribe"``; its
    ``"from"``, when present, must be an integer of at least 0 (else it is no subscription),
    or its ``"after"`` an integer of at least -1 (an exclusive resume: from ``after + 1``; -1
    is "after nothing", a client that delivered nothing yet); without either it starts at
    ``default``.
    """
    if not isinstance(message, str):
        return None
    try:
        body = json.loads(message)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("type") != SUBSCRIBE_TYPE:
        return None
    after = body.get(SUBSCRIBE_AFTER_KEY)
    if isinstance(after, int) and not isinstance(after, bool) and SUBSCRIBE_FROM_KEY not in body:
        return after + 1 if after >= -1 else None
    start = body.get(SUBSCRIBE_FROM_KEY, default)
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        return None
    return start


def subscribed_message(start: int) -> bytes:
    """The acknowledgement of a subscription (``ack=1``): ``{"type":"subscribed","from":N}``."""
    body = {"type": SUBSCRIBED_TYPE, SUBSCRIBE_FROM_KEY: start}
    return json.dumps(body, separators=(",", ":")).encode()


def text_frame(body: bytes) -> bytes:
    """An unmasked, final text frame (server to client) around ``body``."""
    return _frame(_TEXT_OPCODE, body)


def binary_frame(body: bytes) -> bytes:
    """An unmasked, final binary frame (server to client) around ``body``."""
    return _frame(_BINARY_OPCODE, body)


def _frame(opcode: int, body: bytes) -> bytes:
    size = len(body)
    if size < 126:
        return struct.pack("!BB", opcode, size) + body
    if size < 65536:
        return struct.pack("!BBH", opcode, 126, size) + body
    return struct.pack("!BBQ", opcode, 127, size) + body
