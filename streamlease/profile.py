"""A stream's connection profile: how to talk to its upstream (pure; shared by API and worker).

Real feeds are not all like the simulator. A profile, given when a stream is created, says:

- ``headers``: extra handshake headers. A value may be literal, or refer to a secret that the
  worker resolves when it connects and that is never stored, shown or logged: the whole value
  ``secret:<name>`` or placeholders in it, ``Bearer {secret:<name>}``; ``<name>`` is an AWS
  Secrets Manager secret name or ARN under the deployment's ``secrets_prefix``, with
  ``#<key>`` to pick one field of a JSON secret. Headers that usually carry credentials
  (:data:`SENSITIVE_HEADERS`) must use a secret;
- ``subprotocols``: offered in ``Sec-WebSocket-Protocol``;
- ``open_message``: a text frame sent after every (re)connect — a subscribe message; the
  placeholders ``{next_seq}`` and ``{last_seq}`` are replaced by the resume point;
- ``seq``: where each message carries its sequence number — a dotted JSON path (``seq``,
  ``sequence``, ``data.u``), or ``none``: the worker numbers messages itself (continuing from
  the stream's checkpoint) and a failover can lose or repeat what the upstream does not
  replay. Binary frames need ``none``;
- ``resume``: how a reconnect asks for ``last_seq + 1``: a query parameter (``query``, the
  default; ``resume_param`` names it, else the deployment's ``resume_param``), the open
  message (``open_message``: it must contain ``{next_seq}`` or ``{last_seq}``), or not at all
  (``none``, the default, and the only choice, when ``seq`` is ``none``);
- ``idle_seconds``: how many seconds a connected stream may go without a frame before it shows
  as ``stalled`` (default :data:`DEFAULT_IDLE_SECONDS`; a feed that is quiet by nature — an
  idle meeting, a sensor that reports hourly — wants more).

No profile is exactly the behaviour of a stream without one: no headers, JSON text frames with
an integer ``seq``, resume by the query parameter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

MAX_HEADERS: Final = 20
MAX_HEADER_VALUE_CHARS: Final = 1024
MAX_SUBPROTOCOLS: Final = 10
MAX_OPEN_MESSAGE_CHARS: Final = 4096
MAX_SEQ_PATH_PARTS: Final = 8
DEFAULT_IDLE_SECONDS: Final = 60
MIN_IDLE_SECONDS: Final = 1
MAX_IDLE_SECONDS: Final = 86_400
SEQ_NONE: Final = "none"
RESUME_QUERY: Final = "query"
RESUME_OPEN_MESSAGE: Final = "open_message"
RESUME_NONE: Final = "none"
RESUME_METHODS: Final = (RESUME_QUERY, RESUME_OPEN_MESSAGE, RESUME_NONE)

SENSITIVE_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token"}
)
"""Headers whose value must come from a secret, never be stored as given."""
_SENSITIVE_WORDS: Final = ("token", "secret", "password", "signature", "credential")
RESERVED_HEADERS: Final = frozenset(
    {
        "host",
        "upgrade",
        "connection",
        "content-length",
        "transfer-encoding",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
"""Headers the WebSocket handshake sets itself (subprotocols have their own field)."""

_TOKEN: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP token (RFC 9110): header names and subprotocols."""
_PATH_PART: Final = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
_SECRET_NAME: Final = re.compile(r"^[A-Za-z0-9/_+=.@:-]{1,2048}$")
_PLACEHOLDER: Final = re.compile(r"\{secret:([^{}]+)\}")
SECRET_MARKER: Final = "secret:"  # noqa: S105 - the marker of a reference, not a secret
NEXT_SEQ: Final = "{next_seq}"
LAST_SEQ: Final = "{last_seq}"


class ProfileError(ValueError):
    """A profile breaks a rule; ``field`` names the part at fault (``profile.headers.X``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SecretRef:
    """A reference to a Secrets Manager secret (optionally one key of a JSON secret)."""

    name: str
    """Secret name or ARN."""
    key: str | None = None

    @property
    def text(self) -> str:
        """The reference as written (``name`` or ``name#key``)."""
        return self.name if self.key is None else f"{self.name}#{self.key}"

    @classmethod
    def parse(cls, text: str) -> SecretRef:
        """``name`` or ``name#key``. Raises ``ValueError`` for anything else."""
        name, _, key = text.partition("#")
        if not _SECRET_NAME.match(name) or (key and not _PATH_PART.match(key)):
            raise ValueError(f"not a secret name: {text!r}")
        return cls(name, key or None)

    def secret_name(self) -> str:
        """The secret's name (the last part of an ARN, random suffix included)."""
        if self.name.startswith("arn:"):
            return self.name.split(":secret:", 1)[-1]
        return self.name


@dataclass(frozen=True)
class HeaderValue:
    """A header value: literal text with ``{secret:...}`` placeholders (or a whole secret)."""

    template: str

    @property
    def secrets(self) -> tuple[SecretRef, ...]:
        """The secrets this value needs, in order."""
        if self.template.startswith(SECRET_MARKER) and "{" not in self.template:
            return (SecretRef.parse(self.template[len(SECRET_MARKER) :]),)
        return tuple(SecretRef.parse(m) for m in _PLACEHOLDER.findall(self.template))

    def render(self, resolved: Mapping[str, str]) -> str:
        """The value with every secret replaced (``resolved``: reference text → value)."""
        if self.template.startswith(SECRET_MARKER) and "{" not in self.template:
            return resolved[SecretRef.parse(self.template[len(SECRET_MARKER) :]).text]
        return _PLACEHOLDER.sub(lambda m: resolved[SecretRef.parse(m.group(1)).text], self.template)


@dataclass(frozen=True)
class Profile:
    """How to connect to one stream's upstream (see the module docstring)."""

    headers: tuple[tuple[str, HeaderValue], ...] = ()
    subprotocols: tuple[str, ...] = ()
    open_message: str | None = None
    seq_path: tuple[str, ...] | None = ("seq",)
    """None: the worker numbers messages itself (``seq: none``)."""
    resume: str = RESUME_QUERY
    resume_param: str | None = None
    idle_seconds: int = DEFAULT_IDLE_SECONDS
    """A connected stream without a frame for this many seconds shows as ``stalled``."""

    @property
    def is_default(self) -> bool:
        """True for the profile of a stream given none."""
        return self == DEFAULT_PROFILE

    @property
    def secrets(self) -> tuple[SecretRef, ...]:
        """Every secret the handshake needs."""
        return tuple(ref for _, value in self.headers for ref in value.secrets)

    def open_message_for(self, last_seq: int) -> str | None:
        """The open message to send after a connect that resumes after ``last_seq``."""
        if self.open_message is None:
            return None
        return self.open_message.replace(NEXT_SEQ, str(last_seq + 1)).replace(
            LAST_SEQ, str(last_seq)
        )

    def to_item(self) -> dict[str, Any]:
        """The profile as stored on the stream item and shown by the API (defaults left out;
        secret references as written, never a value)."""
        out: dict[str, Any] = {}
        if self.headers:
            out["headers"] = {name: value.template for name, value in self.headers}
        if self.subprotocols:
            out["subprotocols"] = list(self.subprotocols)
        if self.open_message is not None:
            out["open_message"] = self.open_message
        if self.seq_path != ("seq",):
            out["seq"] = SEQ_NONE if self.seq_path is None else ".".join(self.seq_path)
        if self.resume != RESUME_QUERY:
            out["resume"] = self.resume
        if self.resume_param is not None:
            out["resume_param"] = self.resume_param
        if self.idle_seconds != DEFAULT_IDLE_SECONDS:
            out["idle_seconds"] = self.idle_seconds
        return out

    @classmethod
    def from_item(cls, data: Mapping[str, Any] | None) -> Profile:
        """The profile stored on a stream item (None or empty: the default); it was validated
        when the stream was created. Raises :class:`ProfileError` for a corrupt one."""
        if not data:
            return DEFAULT_PROFILE
        return parse_profile(data, secrets_prefix=None)


DEFAULT_PROFILE: Final = Profile()


def parse_profile(data: Mapping[str, Any], *, secrets_prefix: str | None) -> Profile:
    """Validate a profile as given to the API (a JSON object). ``secrets_prefix``: secret
    names must start with it (None: not checked; ``""``: secrets are not allowed).

    Raises :class:`ProfileError` naming the field at fault.
    """
    if not isinstance(data, Mapping):
        raise ProfileError("profile must be a JSON object", "profile")
    known = {
        "headers",
        "subprotocols",
        "open_message",
        "seq",
        "resume",
        "resume_param",
        "idle_seconds",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProfileError(
            f"unknown profile field {unknown[0]!r}; known: {', '.join(sorted(known))}",
            f"profile.{unknown[0]}",
        )
    headers = _headers(data.get("headers"), secrets_prefix)
    subprotocols = _subprotocols(data.get("subprotocols"))
    open_message = data.get("open_message")
    if open_message is not None and (
        not isinstance(open_message, str) or not 0 < len(open_message) <= MAX_OPEN_MESSAGE_CHARS
    ):
        raise ProfileError(
            f"open_message must be text of 1 to {MAX_OPEN_MESSAGE_CHARS} characters",
            "profile.open_message",
        )
    seq_path = _seq_path(data.get("seq", "seq"))
    # Nothing to resume from without a seq: resume defaults to none there.
    resume = data.get("resume", RESUME_QUERY if seq_path is not None else RESUME_NONE)
    if resume not in RESUME_METHODS:
        raise ProfileError(f"resume must be one of {', '.join(RESUME_METHODS)}", "profile.resume")
    if resume == RESUME_OPEN_MESSAGE and (
        open_message is None or (NEXT_SEQ not in open_message and LAST_SEQ not in open_message)
    ):
        raise ProfileError(
            "resume by open_message needs an open_message containing {next_seq} or {last_seq}",
            "profile.open_message",
        )
    if seq_path is None and resume != RESUME_NONE:
        raise ProfileError(
            "with seq none there is nothing to resume from: leave resume out or set it to none",
            "profile.resume",
        )
    resume_param = data.get("resume_param")
    if resume_param is not None and (
        resume != RESUME_QUERY
        or not isinstance(resume_param, str)
        or not _TOKEN.match(resume_param)
    ):
        raise ProfileError(
            "resume_param is a query parameter name, and only for resume by query",
            "profile.resume_param",
        )
    return Profile(
        headers=headers,
        subprotocols=subprotocols,
        open_message=open_message,
        seq_path=seq_path,
        resume=resume,
        resume_param=resume_param,
        idle_seconds=_idle_seconds(data.get("idle_seconds", DEFAULT_IDLE_SECONDS)),
    )


def _headers(raw: Any, secrets_prefix: str | None) -> tuple[tuple[str, HeaderValue], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or len(raw) > MAX_HEADERS:
        raise ProfileError(
            f"headers must be an object of at most {MAX_HEADERS} names", "profile.headers"
        )
    out = []
    seen: set[str] = set()
    for name, value in raw.items():
        where = f"profile.headers.{name}"
        lowered = str(name).lower()
        if not isinstance(name, str) or not _TOKEN.match(name) or lowered in seen:
            raise ProfileError("header names are HTTP tokens, each once", "profile.headers")
        seen.add(lowered)
        if lowered in RESERVED_HEADERS:
            raise ProfileError(f"{name} is set by the WebSocket handshake itself", where)
        if (
            not isinstance(value, str)
            or not 0 < len(value) <= MAX_HEADER_VALUE_CHARS
            or any(c in value for c in "\r\n\x00")
        ):
            raise ProfileError(
                f"a header value is one line of 1 to {MAX_HEADER_VALUE_CHARS} characters", where
            )
        header = HeaderValue(value)
        try:
            refs = header.secrets
        except ValueError as exc:
            raise ProfileError(str(exc), where) from None
        if not refs and _sensitive(lowered):
            raise ProfileError(
                f"{name} carries credentials: give it as secret:<name> (a Secrets Manager "
                "secret), never the value itself",
                where,
            )
        if refs and secrets_prefix is not None:
            for ref in refs:
                if not secrets_prefix:
                    raise ProfileError("secret references are not enabled here", where)
                if not ref.secret_name().startswith(secrets_prefix):
                    raise ProfileError(f"secret names must start with {secrets_prefix!r}", where)
        out.append((name, header))
    return tuple(out)


def _sensitive(lowered_name: str) -> bool:
    return lowered_name in SENSITIVE_HEADERS or any(w in lowered_name for w in _SENSITIVE_WORDS)


def _subprotocols(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if (
        not isinstance(raw, list)
        or len(raw) > MAX_SUBPROTOCOLS
        or not all(isinstance(p, str) and _TOKEN.match(p) for p in raw)
        or len(set(raw)) != len(raw)
    ):
        raise ProfileError(
            f"subprotocols is a list of at most {MAX_SUBPROTOCOLS} distinct HTTP tokens",
            "profile.subprotocols",
        )
    return tuple(raw)


def _idle_seconds(raw: Any) -> int:
    # Whole seconds: a stored profile holds no fractions (DynamoDB numbers come back Decimal).
    if (
        isinstance(raw, bool)
        or not isinstance(raw, int)
        or not MIN_IDLE_SECONDS <= raw <= MAX_IDLE_SECONDS
    ):
        raise ProfileError(
            f"idle_seconds is a whole number of seconds from {MIN_IDLE_SECONDS} to"
            f" {MAX_IDLE_SECONDS}",
            "profile.idle_seconds",
        )
    return raw


def _seq_path(raw: Any) -> tuple[str, ...] | None:
    if raw == SEQ_NONE:
        return None
    parts = raw.split(".") if isinstance(raw, str) else []
    if not parts or len(parts) > MAX_SEQ_PATH_PARTS or not all(_PATH_PART.match(p) for p in parts):
        raise ProfileError(
            "seq is a dotted JSON path of up to 8 names (seq, sequence, data.u) or none",
            "profile.seq",
        )
    return tuple(parts)
