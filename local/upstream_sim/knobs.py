"""How a connection behaves: its knobs (parsed from the query, checked strictly), programmatic
faults, and the statistics the simulator keeps per stream. What is sent is in ``payloads``."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl

from local.upstream_sim.payloads import SEQ_FIELD, check_seq_field

DEFAULT_RATE: Final = 10.0
MAX_PAD: Final = 60_000
"""Most filler ``pad`` adds: a frame stays under the simulator's 64 KiB message size."""
ALL_STREAMS: Final = "*"
"""Stream id for :meth:`UpstreamSimulator.set_fault` that applies to every stream."""

_FLAGS: Final = ("subscribe", "ack", "binary", "noseq", "last_event_id")
_TEXTS: Final = frozenset({"bearer", "subprotocol", "seq_field", "login"})
_FLOATS: Final = frozenset({"rate", "ping_within"})
_TOKEN = re.compile(r"[\x21-\x7e]+")  # visible ASCII: sendable in a header as is
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SUBPROTOCOL = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)


@dataclass(frozen=True)
class Knobs:
    """What one connection does. Parsed from the query, overridden by a programmatic fault."""

    rate: float = DEFAULT_RATE
    first_seq: int = 1
    """The feed's first seq: where a connection that asks for none, or for an earlier one,
    starts (0 for a feed that begins at 0)."""
    from_seq: int = 1
    """The first seq asked for (from the query: ``first_seq`` when not asked)."""
    until_seq: int | None = None
    drop_after: int | None = None
    close_code: int | None = None
    close_after: int | None = None
    reject: int | None = None
    garbage_every: int | None = None
    gap_every: int | None = None
    replay_back: int = 0
    bearer: str | None = field(default=None, repr=False)
    """Bearer token the handshake must carry; never logged, never in stats. Not named ``token``:
    URLs carry query credentials under that name, which the simulator must leave alone."""
    subprotocol: str | None = None
    subscribe: bool = False
    ack: bool = False
    seq_field: str = SEQ_FIELD
    binary: bool = False
    noseq: bool = False
    last_event_id: bool = False
    """Resume after the ``Last-Event-ID`` handshake header when there is one (exclusive)."""
    login: str | None = field(default=None, repr=False)
    """The SHA-256 (hex) of a key the client must send as ``{"action":"auth","params":KEY}``
    before anything is streamed; answered ``auth_success``, or ``auth_failed`` and close 1008.
    A digest, so that the URL that carries the knob never carries the key itself."""
    pad: int = 0
    """Filler characters appended to ``data`` of the default layout (a larger payload: feeds
    carry 200 B to a few KB where the bare message is ~60 B); 0 in every other mode."""
    ping_within: float | None = None
    """Close (4000) a connection that sent no message of its own for this many seconds
    (WebSocket pings do not count); ``{"op":"ping"}`` is answered ``{"op":"pong"}``."""

    @property
    def interactive(self) -> bool:
        """Whether the connection reads what the client says (a login, a subscribe, pings)."""
        return self.subscribe or self.login is not None or self.ping_within is not None

    @classmethod
    def from_query(cls, query: str, resume_param: str, default_rate: float) -> Knobs:
        """Knobs from a query string. Raises ``ValueError`` for a knob that does not parse."""
        values: dict[str, Any] = {"rate": default_rate}
        names = {f.name for f in dataclasses.fields(cls)}
        for name, raw in parse_qsl(query, keep_blank_values=True):
            key = "from_seq" if name == resume_param else name
            if key == "after":  # an exclusive resume: replay after K (-1: after nothing)
                values["from_seq"] = int(raw) + 1
                continue
            if key not in names:
                continue  # unknown parameters belong to the URL, not to the simulator
            values[key] = _parse(key, raw)
        values.setdefault("from_seq", values.get("first_seq", cls.first_seq))
        knobs = cls(**values)
        knobs.validate()
        return knobs

    def validate(self) -> None:
        """Raises ``ValueError`` when a knob is out of range or modes do not combine."""
        if not math.isfinite(self.rate) or self.rate < 0:
            raise ValueError("rate must be a finite number of messages/s, at least 0")
        if not isinstance(self.pad, int) or not 0 <= self.pad <= MAX_PAD:
            raise ValueError(f"pad must be from 0 to {MAX_PAD} characters")
        if self.pad and (self.binary or self.noseq or self.seq_field != SEQ_FIELD):
            raise ValueError("pad lengthens the default layout's data only")
        if min(self.first_seq, self.from_seq, self.replay_back) < 0:
            raise ValueError("first_seq, from_seq or replay_back out of range")
        for every in (self.garbage_every, self.gap_every):
            if every is not None and every < 1:
                raise ValueError("garbage_every and gap_every must be at least 1")
        if self.reject is not None and not 300 <= self.reject <= 599:
            raise ValueError("reject must be an HTTP status from 300 to 599")
        self._validate_modes()

    def _validate_modes(self) -> None:
        for name in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool (0 or 1 in a query)")
        if self.bearer is not None and not (
            isinstance(self.bearer, str) and _TOKEN.fullmatch(self.bearer)
        ):
            raise ValueError("bearer must be non-empty visible ASCII without spaces")
        if self.subprotocol is not None and not (
            isinstance(self.subprotocol, str) and _SUBPROTOCOL.fullmatch(self.subprotocol)
        ):
            raise ValueError("subprotocol must be an HTTP token")
        if not isinstance(self.seq_field, str):
            raise ValueError("seq_field must be a dotted path")
        check_seq_field(self.seq_field)
        if self.login is not None and not (
            isinstance(self.login, str) and _SHA256.fullmatch(self.login)
        ):
            raise ValueError("login must be the SHA-256 of the key, 64 hex digits")
        if self.ping_within is not None and not (
            math.isfinite(self.ping_within) and self.ping_within > 0
        ):
            raise ValueError("ping_within must be a positive number of seconds")
        if self.ack and not self.subscribe:
            raise ValueError("ack needs subscribe")
        if self.noseq and self.seq_field != SEQ_FIELD:
            raise ValueError("noseq and seq_field exclude each other")
        if self.binary and (self.noseq or self.seq_field != SEQ_FIELD):
            raise ValueError("binary frames have their own layout: no noseq or seq_field")


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
    """Handshakes refused: ``reject``, no bearer token (401) or no subprotocol (400)."""
    open: int = 0
    messages_sent: int = 0
    from_seqs: list[int] = field(default_factory=list)
    """``from_seq`` asked for by each accepted connection, in order."""
    attempt_times: list[float] = field(default_factory=list)
    """``time.monotonic()`` of each handshake request."""
    last_host_header: str = ""
    close_codes_received: list[int | None] = field(default_factory=list)
    """Close code each ended connection received from the client; ``None``: no close frame."""
    auth_failures: int = 0
    """Handshakes refused with 401: ``bearer`` set, ``Authorization: Bearer <value>`` missing."""
    subprotocol_failures: int = 0
    """Handshakes refused with 400: ``subprotocol`` set and not offered by the client."""
    subprotocols: list[str | None] = field(default_factory=list)
    """Subprotocol selected for each accepted connection, in order; ``None``: none selected."""
    subscriptions: list[int] = field(default_factory=list)
    """Where each subscription (``subscribe=1``) asked to start, in order."""
    ignored_messages: int = 0
    """Client messages that started no subscription, login or ping (interactive only)."""
    logins: int = 0
    """Logins the simulator accepted (``login``)."""
    login_failures: int = 0
    """Logins refused (a wrong key, or a message before the login)."""
    client_pings: int = 0
    """``{"op":"ping"}`` messages from clients (each answered with a pong)."""
    ping_timeouts: int = 0
    """Connections closed (4000) for sending nothing within ``ping_within``."""


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


def _parse(key: str, raw: str) -> Any:
    """One query value as the knob's type. Raises ``ValueError`` when it does not parse."""
    if key in _FLOATS:
        return float(raw)
    if key in _TEXTS:
        return raw
    if key in _FLAGS:
        if raw not in ("0", "1"):
            raise ValueError(f"{key} must be 0 or 1")
        return raw == "1"
    return int(raw)
