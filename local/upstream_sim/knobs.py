"""What the simulator sends and how a connection behaves: knobs, payloads, frames, statistics."""

from __future__ import annotations

import dataclasses
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl

DEFAULT_RATE: Final = 10.0
ALL_STREAMS: Final = "*"
"""Stream id for :meth:`UpstreamSimulator.set_fault` that applies to every stream."""

GARBAGE_FRAMES: Final = (
    b"\x81\x0fnot json at all",
    b'\x81\x0f{"no_seq":true}',
    b'\x81\x0b{"seq":"7"}',
    b"\x81\x07[1,2,3]",
    b"\x82\x03\xff\xfe\x00",  # binary frame, not UTF-8
)


def payload_for(stream_id: str, seq: int) -> str:
    """The ``data`` of message ``seq`` of ``stream_id``: a pure function, for checkers."""
    return f"{stream_id}:{seq}:{mix(zlib.crc32(stream_id.encode()), seq):08x}"


def mix(stream_hash: int, seq: int) -> int:
    return ((seq * 0x9E3779B1) ^ stream_hash) & 0xFFFFFFFF


@dataclass(frozen=True)
class Knobs:
    """What one connection does. Parsed from the query, overridden by a programmatic fault."""

    rate: float = DEFAULT_RATE
    from_seq: int = 1
    until_seq: int | None = None
    drop_after: int | None = None
    close_code: int | None = None
    close_after: int | None = None
    reject: int | None = None
    garbage_every: int | None = None
    gap_every: int | None = None
    replay_back: int = 0

    @classmethod
    def from_query(cls, query: str, resume_param: str, default_rate: float) -> Knobs:
        """Knobs from a query string. Raises ``ValueError`` for a knob that does not parse."""
        values: dict[str, Any] = {"rate": default_rate}
        names = {f.name for f in dataclasses.fields(cls)}
        for name, raw in parse_qsl(query, keep_blank_values=True):
            key = "from_seq" if name == resume_param else name
            if key not in names:
                continue  # unknown parameters belong to the URL, not to the simulator
            values[key] = float(raw) if key == "rate" else int(raw)
        knobs = cls(**values)
        knobs.validate()
        return knobs

    def validate(self) -> None:
        """Raises ``ValueError`` when a knob is out of range."""
        if self.rate < 0 or self.from_seq < 1 or self.replay_back < 0:
            raise ValueError("rate, from_seq or replay_back out of range")
        for every in (self.garbage_every, self.gap_every):
            if every is not None and every < 1:
                raise ValueError("garbage_every and gap_every must be at least 1")
        if self.reject is not None and not 300 <= self.reject <= 599:
            raise ValueError("reject must be an HTTP status from 300 to 599")


@dataclass
class Fault:
    """A programmatic override of knobs for one stream (or :data:`ALL_STREAMS`)."""

    knobs: dict[str, Any]
    remaining: int | None
    """Connections left that this fault applies to; ``None`` means until cleared."""


@dataclass
class StreamStats:
    """What the simulator saw for one stream. A snapshot: copies, not live views."""

    attempts: int = 0
    """Handshake requests, accepted or not."""
    accepted: int = 0
    rejected: int = 0
    open: int = 0
    messages_sent: int = 0
    from_seqs: list[int] = field(default_factory=list)
    """``from_seq`` asked for by each accepted connection, in order."""
    attempt_times: list[float] = field(default_factory=list)
    """``time.monotonic()`` of each handshake request."""
    last_host_header: str = ""
    close_codes_received: list[int | None] = field(default_factory=list)
    """Close code each ended connection received from the client; ``None``: no close frame."""


def end_plan(knobs: Knobs) -> tuple[int | None, int | None]:
    """(messages after which the connection ends, close code or ``None`` for an abort)."""
    plans: list[tuple[int, int | None]] = []
    if knobs.drop_after is not None:
        plans.append((knobs.drop_after, None))
    if knobs.close_code is not None:
        plans.append((knobs.close_after or 0, knobs.close_code))
    if not plans:
        return None, None
    return min(plans, key=lambda plan: plan[0])


def text_frame(body: bytes) -> bytes:
    """An unmasked, final text frame (server to client) around ``body``."""
    size = len(body)
    if size < 126:
        return struct.pack("!BB", 0x81, size) + body
    if size < 65536:
        return struct.pack("!BBH", 0x81, 126, size) + body
    return struct.pack("!BBQ", 0x81, 127, size) + body
