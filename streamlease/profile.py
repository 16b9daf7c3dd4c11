"""A stream's connection profile: how to talk to its upstream (pure; shared by API and worker).

Real feeds are not all like the simulator. A profile, given when a stream is created (or changed
in place), says:

- ``headers``: extra handshake headers. A value may be literal, or refer to a secret that the
  worker resolves when it connects and that is never stored, shown or logged: the whole value
  ``secret:<name>`` or placeholders in it, ``Bearer {secret:<name>}``; ``<name>`` is an AWS
  Secrets Manager secret name or ARN under the deployment's ``secrets_prefix``, with
  ``#<key>`` to pick one field of a JSON secret. Headers that usually carry credentials
  (:data:`SENSITIVE_HEADERS`) must use a secret. A value may carry the resume point
  (``{next_seq}``, ``{last_seq}``: a ``Last-Event-ID``);
- ``query``: query parameters added to the URL on every connect, each a template that may carry
  the resume point (``{"after": "{last_seq}"}``: an exclusive resume); no secrets;
- ``subprotocols``: offered in ``Sec-WebSocket-Protocol``;
- ``open_messages``: up to five messages sent in order after every (re)connect — a login, then a
  subscribe — each a template (:mod:`streamlease.templates`) that may carry secrets and the
  resume point; a message with ``expect`` waits for a matching answer (``refuse``: an answer
  that means no) within ``timeout_seconds`` before the next one is sent, and a refusal or no
  answer is a rejection. A literal credential is refused as in a header. ``open_message`` (one
  text) is the shorthand for one message that waits for nothing;
- ``seq``: where each message carries its sequence number — a dotted JSON path (``seq``,
  ``sequence``, ``data.u``), or ``none``: the worker numbers messages itself (continuing from
  the stream's checkpoint) and a failover can lose or repeat what the upstream does not
  replay. Binary frames need ``none``;
- ``resume``: where a reconnect states its resume point: the query (``query``, the default:
  a ``query`` parameter with a placeholder, else the shorthand ``resume_param`` — or the
  deployment's ``resume_param`` — asking for ``last_seq + 1``), a ``header`` value or the
  open messages (a placeholder there), or not at all (``none``, the default, and the
  only choice, when ``seq`` is ``none``);
- ``ping``: ``{"send": <text>, "interval_seconds": N}``, a message the upstream wants as proof
  of life (WebSocket pings do not count for some feeds);
- ``control``: up to five JSON conditions; frames matching one (pong answers, heartbeats,
  status messages) are not data: skipped, and counted apart from malformed ones;
- ``idle_seconds``: how many seconds a connected stream may go without a frame before it shows
  as ``stalled`` (default :data:`DEFAULT_IDLE_SECONDS`; a feed that is quiet by nature — an
  idle meeting, a sensor that reports hourly — wants more).

No profile is exactly the behaviour of a stream without one: no headers, JSON text frames with
an integer ``seq``, resume by the query parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from streamlease.profile_fields import (
    DEFAULT_IDLE_SECONDS,
    MAX_HEADERS,
    MAX_IDLE_SECONDS,
    MAX_SUBPROTOCOLS,
    MIN_IDLE_SECONDS,
    SEQ_NONE,
    HeaderValue,
    ProfileError,
    control_field,
    headers_field,
    idle_seconds_field,
    is_token,
    open_messages_field,
    query_field,
    seq_path_field,
    subprotocols_field,
)
from streamlease.templates import (
    LAST_SEQ,
    MAX_OPEN_MESSAGE_CHARS,
    NEXT_SEQ,
    AppPing,
    Condition,
    OpenMessage,
    SecretRef,
    Template,
    TemplateError,
    parse_ping,
)

__all__ = [
    "DEFAULT_IDLE_SECONDS",
    "DEFAULT_PROFILE",
    "LAST_SEQ",
    "MAX_HEADERS",
    "MAX_IDLE_SECONDS",
    "MAX_OPEN_MESSAGE_CHARS",
    "MAX_SUBPROTOCOLS",
    "MIN_IDLE_SECONDS",
    "NEXT_SEQ",
    "SEQ_NONE",
    "HeaderValue",
    "Profile",
    "ProfileError",
    "SecretRef",
    "parse_profile",
]

RESUME_QUERY: Final = "query"
RESUME_HEADER: Final = "header"
RESUME_OPEN_MESSAGE: Final = "open_message"
RESUME_NONE: Final = "none"
RESUME_METHODS: Final = (RESUME_QUERY, RESUME_HEADER, RESUME_OPEN_MESSAGE, RESUME_NONE)
FIELDS: Final = (
    "headers",
    "query",
    "subprotocols",
    "open_message",
    "open_messages",
    "seq",
    "resume",
    "resume_param",
    "ping",
    "control",
    "idle_seconds",
)
"""Every field a profile may have."""


@dataclass(frozen=True)
class Profile:
    """How to connect to one stream's upstream (see the module docstring)."""

    headers: tuple[tuple[str, HeaderValue], ...] = ()
    query: tuple[tuple[str, Template], ...] = ()
    subprotocols: tuple[str, ...] = ()
    open_messages: tuple[OpenMessage, ...] = ()
    seq_path: tuple[str, ...] | None = ("seq",)
    """None: the worker numbers messages itself (``seq: none``)."""
    resume: str = RESUME_QUERY
    resume_param: str | None = None
    ping: AppPing | None = None
    control: tuple[Condition, ...] = ()
    """Frames matching one of these are control frames: skipped, counted apart."""
    idle_seconds: int = DEFAULT_IDLE_SECONDS
    """A connected stream without a frame for this many seconds shows as ``stalled``."""

    @property
    def is_default(self) -> bool:
        """True for the profile of a stream given none."""
        return self == DEFAULT_PROFILE

    @property
    def secrets(self) -> tuple[SecretRef, ...]:
        """Every secret a connect needs (headers, then open messages), each once."""
        refs = [ref for _, value in self.headers for ref in value.secrets]
        refs += [ref for message in self.open_messages for ref in message.send.secrets]
        return tuple(dict.fromkeys(refs))

    def query_for(self, last_seq: int, default_param: str) -> list[tuple[str, str]]:
        """The query parameters of a connect that resumes after ``last_seq`` (the shorthand
        resume by query asks for ``last_seq + 1`` in ``resume_param``, else
        ``default_param``; an empty name: not at all). Before the first delivery a parameter
        holding ``{last_seq}`` is left out (:meth:`~streamlease.templates.Template.leaves_out`)."""
        params = [
            (name, value.render({}, last_seq))
            for name, value in self.query
            if not value.leaves_out(last_seq)
        ]
        if self.resume == RESUME_QUERY and not any(v.resumes for _, v in self.query):
            param = self.resume_param or default_param
            if param:
                params.append((param, str(last_seq + 1)))
        return params

    def headers_for(self, resolved: Mapping[str, str], last_seq: int) -> list[tuple[str, str]]:
        """The extra handshake headers of a connect that resumes after ``last_seq``
        (``resolved``: secret reference text → value). Before the first delivery a header
        holding ``{last_seq}`` (a ``Last-Event-ID``) is left out, as a first connect sends
        none."""
        return [
            (name, value.render(resolved, last_seq))
            for name, value in self.headers
            if not value.as_template.leaves_out(last_seq)
        ]

    def to_item(self) -> dict[str, Any]:
        """The profile as stored on the stream item and shown by the API (defaults left out;
        secret references as written, never a value)."""
        out: dict[str, Any] = {}
        if self.headers:
            out["headers"] = {name: value.template for name, value in self.headers}
        if self.query:
            out["query"] = {name: value.text for name, value in self.query}
        if self.subprotocols:
            out["subprotocols"] = list(self.subprotocols)
        messages = [message.to_item() for message in self.open_messages]
        if len(messages) == 1 and isinstance(messages[0], str):
            out["open_message"] = messages[0]
        elif messages:
            out["open_messages"] = messages
        if self.seq_path != ("seq",):
            out["seq"] = SEQ_NONE if self.seq_path is None else ".".join(self.seq_path)
        if self.resume != RESUME_QUERY:
            out["resume"] = self.resume
        if self.resume_param is not None:
            out["resume_param"] = self.resume_param
        if self.ping is not None:
            out["ping"] = self.ping.to_item()
        if self.control:
            out["control"] = [dict(condition.expected) for condition in self.control]
        if self.idle_seconds != DEFAULT_IDLE_SECONDS:
            out["idle_seconds"] = self.idle_seconds
        return out

    @classmethod
    def from_item(cls, data: Mapping[str, Any] | None) -> Profile:
        """The profile stored on a stream item (None or empty: the default); it was validated
        when it was stored. Raises :class:`ProfileError` for a corrupt one."""
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
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ProfileError(
            f"unknown profile field {unknown[0]!r}; known: {', '.join(sorted(FIELDS))}",
            f"profile.{unknown[0]}",
        )
    try:
        headers = headers_field(data.get("headers"), secrets_prefix)
        query = query_field(data.get("query"))
        open_messages = open_messages_field(data, secrets_prefix)
        ping = None if data.get("ping") is None else parse_ping(data["ping"], "ping")
        control = control_field(data.get("control"))
    except TemplateError as exc:
        raise ProfileError(str(exc), f"profile.{exc.field}") from None
    subprotocols = subprotocols_field(data.get("subprotocols"))
    seq_path = seq_path_field(data.get("seq", "seq"))
    # Nothing to resume from without a seq: resume defaults to none there.
    resume = data.get("resume", RESUME_QUERY if seq_path is not None else RESUME_NONE)
    if resume not in RESUME_METHODS:
        raise ProfileError(f"resume must be one of {', '.join(RESUME_METHODS)}", "profile.resume")
    places = {
        RESUME_QUERY: any(value.resumes for _, value in query),
        RESUME_HEADER: any(value.as_template.resumes for _, value in headers),
        RESUME_OPEN_MESSAGE: any(message.send.resumes for message in open_messages),
    }
    if resume in (RESUME_HEADER, RESUME_OPEN_MESSAGE) and not places[resume]:
        where = "a header value" if resume == RESUME_HEADER else "an open message"
        field = "headers" if resume == RESUME_HEADER else _messages_field(data)
        raise ProfileError(
            f"resume by {resume} needs {where} containing {NEXT_SEQ} or {LAST_SEQ}",
            f"profile.{field}",
        )
    if seq_path is None and (resume != RESUME_NONE or any(places.values())):
        raise ProfileError(
            "with seq none there is nothing to resume from: leave resume out or set it to "
            f"none, and use no {NEXT_SEQ} or {LAST_SEQ}",
            "profile.resume",
        )
    resume_param = data.get("resume_param")
    if resume_param is not None and (
        resume != RESUME_QUERY
        or places[RESUME_QUERY]
        or not isinstance(resume_param, str)
        or not is_token(resume_param)
    ):
        raise ProfileError(
            "resume_param is a query parameter name, only for resume by query, and only "
            "without a query parameter that carries the resume point itself",
            "profile.resume_param",
        )
    return Profile(
        headers=headers,
        query=query,
        subprotocols=subprotocols,
        open_messages=open_messages,
        seq_path=seq_path,
        resume=resume,
        resume_param=resume_param,
        ping=ping,
        control=control,
        idle_seconds=idle_seconds_field(data.get("idle_seconds", DEFAULT_IDLE_SECONDS)),
    )


def _messages_field(data: Mapping[str, Any]) -> str:
    return "open_messages" if "open_messages" in data else "open_message"
