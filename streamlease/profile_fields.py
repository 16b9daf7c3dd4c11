"""Checks of each field of a connection profile, and its header values (pure; the profile
itself and the rules across fields are :mod:`streamlease.profile`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, unquote_plus, urlsplit, urlunsplit

from streamlease.seqs import NOTHING_DELIVERED
from streamlease.templates import (
    LAST_SEQ,
    MAX_CONTROL_CONDITIONS,
    MAX_OPEN_MESSAGES,
    NEXT_SEQ,
    SECRET_MARKER,
    Condition,
    OpenMessage,
    SecretRef,
    Template,
    TemplateError,
    is_sensitive_name,
    parse_condition,
    parse_open_message,
)

MAX_HEADERS: Final = 20
MAX_HEADER_VALUE_CHARS: Final = 1024
MAX_QUERY_PARAMS: Final = 10
MAX_SUBPROTOCOLS: Final = 10
MAX_SEQ_PATH_PARTS: Final = 8
DEFAULT_IDLE_SECONDS: Final = 60
MIN_IDLE_SECONDS: Final = 1
MAX_IDLE_SECONDS: Final = 86_400
SEQ_NONE: Final = "none"
SENSITIVE_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token"}
)
"""Headers whose value must come from a secret, never be stored as given."""
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

HTTP_NAME_PATTERN: Final = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
"""An HTTP token (RFC 9110): header names and subprotocols."""
PATH_PART_CHARS: Final = r"[A-Za-z0-9_$-]{1,64}"
"""One name of a dotted ``seq`` path."""
QUERY_VALUE_PATTERN: Final = r"^[A-Za-z0-9._~:@!$'()*+,;=/?{}-]{0,256}$"
_TOKEN: Final = re.compile(HTTP_NAME_PATTERN)
_PATH_PART: Final = re.compile(f"^{PATH_PART_CHARS}$")
_QUERY_VALUE: Final = re.compile(QUERY_VALUE_PATTERN)
"""A query value as written: unreserved and sub-delimiter characters, braces for the
placeholders (``&``, ``#``, ``%`` and spaces are not)."""


def is_token(text: str) -> bool:
    """Whether ``text`` is an HTTP token (a header name, a subprotocol, a parameter name)."""
    return _TOKEN.match(text) is not None


class ProfileError(ValueError):
    """A profile breaks a rule; ``field`` names the part at fault (``profile.headers.X``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class HeaderValue:
    """A header value: literal text with placeholders (secrets, the resume point), or a whole
    secret (``secret:<name>``)."""

    template: str

    @property
    def as_template(self) -> Template:
        """The value as a :class:`Template` (a whole secret is its one placeholder)."""
        if self.template.startswith(SECRET_MARKER) and "{" not in self.template:
            return Template("{" + self.template + "}")
        return Template(self.template)

    @property
    def secrets(self) -> tuple[SecretRef, ...]:
        """The secrets this value needs, in order."""
        return self.as_template.secrets

    def render(self, resolved: Mapping[str, str], last_seq: int = NOTHING_DELIVERED) -> str:
        """The value with every secret replaced (``resolved``: reference text → value) and the
        resume point after ``last_seq`` (default: nothing delivered)."""
        return self.as_template.render(resolved, last_seq)


def open_messages_field(
    data: Mapping[str, Any], secrets_prefix: str | None
) -> tuple[OpenMessage, ...]:
    """``open_messages`` or its one-text shorthand ``open_message`` (not both)."""
    if data.get("open_message") is not None:
        if data.get("open_messages") is not None:
            raise TemplateError("give open_message or open_messages, not both", "open_message")
        messages = (parse_open_message(data["open_message"], "open_message"),)
        check_refs(messages[0].send.secrets, secrets_prefix, "open_message")
        return messages
    raw = data.get("open_messages")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_OPEN_MESSAGES:
        raise TemplateError(
            f"open_messages is a list of 1 to {MAX_OPEN_MESSAGES} messages", "open_messages"
        )
    out = []
    for index, item in enumerate(raw):
        message = parse_open_message(item, f"open_messages.{index}")
        check_refs(message.send.secrets, secrets_prefix, f"open_messages.{index}")
        out.append(message)
    return tuple(out)


def check_refs(refs: tuple[SecretRef, ...], secrets_prefix: str | None, field: str) -> None:
    """Every reference is under the deployment's prefix. Raises :class:`TemplateError`."""
    if not refs or secrets_prefix is None:
        return
    if not secrets_prefix:
        raise TemplateError("secret references are not enabled here", field)
    for ref in refs:
        if not ref.secret_name().startswith(secrets_prefix):
            raise TemplateError(f"secret names must start with {secrets_prefix!r}", field)


def headers_field(raw: Any, secrets_prefix: str | None) -> tuple[tuple[str, HeaderValue], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or len(raw) > MAX_HEADERS:
        raise ProfileError(
            f"headers must be an object of at most {MAX_HEADERS} names", "profile.headers"
        )
    out = []
    seen: set[str] = set()
    for name, value in raw.items():
        where = f"headers.{name}"
        lowered = str(name).lower()
        if not isinstance(name, str) or not _TOKEN.match(name) or lowered in seen:
            raise ProfileError("header names are HTTP tokens, each once", "profile.headers")
        seen.add(lowered)
        if lowered in RESERVED_HEADERS:
            raise ProfileError(
                f"{name} is set by the WebSocket handshake itself", f"profile.{where}"
            )
        if (
            not isinstance(value, str)
            or not 0 < len(value) <= MAX_HEADER_VALUE_CHARS
            or any(c in value for c in "\r\n\x00")
        ):
            raise ProfileError(
                f"a header value is one line of 1 to {MAX_HEADER_VALUE_CHARS} characters",
                f"profile.{where}",
            )
        header = HeaderValue(value)
        try:
            refs = header.secrets
        except ValueError as exc:
            raise ProfileError(str(exc), f"profile.{where}") from None
        if not refs and (lowered in SENSITIVE_HEADERS or is_sensitive_name(lowered)):
            raise ProfileError(
                f"{name} carries credentials: give it as secret:<name> (a Secrets Manager "
                "secret), never the value itself",
                f"profile.{where}",
            )
        check_refs(refs, secrets_prefix, where)
        out.append((name, header))
    return tuple(out)


def refuse_credential_parameter(name: str, where: str) -> None:
    """The one rule for a query parameter's name, in ``profile.query`` and in ``ws_url``'s own
    query alike: a name that says its value is a credential (``token``, ``password``, ...) is
    refused. Raises :class:`TemplateError` naming ``where`` and the parameter."""
    if is_sensitive_name(name.lower()):
        raise TemplateError(
            f"{name} carries a credential: a URL is no place for one; use a header or an "
            "open message with a secret",
            where,
        )


def credential_parameter(url: str) -> str | None:
    """The first parameter of ``url``'s query whose name says it carries a credential (as
    :func:`refuse_credential_parameter` judges, names percent-decoded), or None."""
    for name, _ in _query_pairs(url):
        if is_sensitive_name(name.lower()):
            return name
    return None


MASK: Final = "***"
"""What replaces a credential's value wherever a stored URL is shown."""


def masked_url(url: str) -> str:
    """``url`` with the value of every credential-named query parameter replaced by
    :data:`MASK`: how an answer shows a URL stored before such URLs were refused."""
    if credential_parameter(url) is None:
        return url
    parts = urlsplit(url)
    kept = []
    for piece in parts.query.split("&"):
        raw_name, sep, _ = piece.partition("=")
        if sep and is_sensitive_name(unquote_plus(raw_name).lower()):
            kept.append(f"{raw_name}={MASK}")
        else:
            kept.append(piece)
    return urlunsplit(parts._replace(query="&".join(kept)))


def _query_pairs(url: str) -> list[tuple[str, str]]:
    try:
        return parse_qsl(urlsplit(url).query, keep_blank_values=True)
    except ValueError:
        return []


def query_field(raw: Any) -> tuple[tuple[str, Template], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not 0 < len(raw) <= MAX_QUERY_PARAMS:
        raise TemplateError(f"query is an object of 1 to {MAX_QUERY_PARAMS} parameters", "query")
    out = []
    for name, value in raw.items():
        where = f"query.{name}"
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise TemplateError("query parameter names are HTTP tokens", "query")
        refuse_credential_parameter(name, where)
        if not isinstance(value, str) or not _QUERY_VALUE.match(value):
            raise TemplateError(
                "a query value is up to 256 URL characters (no &, #, % or spaces)", where
            )
        literal = value.replace(NEXT_SEQ, "").replace(LAST_SEQ, "")
        if "{" in literal or "}" in literal:
            raise TemplateError(
                f"a query value may hold {NEXT_SEQ} or {LAST_SEQ}, no other placeholder", where
            )
        out.append((name, Template(value)))
    return tuple(out)


def control_field(raw: Any) -> tuple[Condition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_CONTROL_CONDITIONS:
        raise TemplateError(
            f"control is a list of 1 to {MAX_CONTROL_CONDITIONS} conditions", "control"
        )
    return tuple(parse_condition(item, f"control.{i}") for i, item in enumerate(raw))


def subprotocols_field(raw: Any) -> tuple[str, ...]:
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


def idle_seconds_field(raw: Any) -> int:
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


def seq_path_field(raw: Any) -> tuple[str, ...] | None:
    if raw == SEQ_NONE:
        return None
    parts = raw.split(".") if isinstance(raw, str) else []
    if not parts or len(parts) > MAX_SEQ_PATH_PARTS or not all(_PATH_PART.match(p) for p in parts):
        raise ProfileError(
            "seq is a dotted JSON path of up to 8 names (seq, sequence, data.u) or none",
            "profile.seq",
        )
    return tuple(parts)
