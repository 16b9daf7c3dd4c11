"""Request bodies of the REST API (pydantic models; the OpenAPI schemas), and what their patterns
mean in words."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.api_schema_rules import change_rules, create_rules, profile_rules
from streamlease.profile import (
    DEFAULT_IDLE_SECONDS,
    MAX_HEADERS,
    MAX_IDLE_SECONDS,
    MAX_OPEN_MESSAGE_CHARS,
    MAX_SUBPROTOCOLS,
    MIN_IDLE_SECONDS,
)
from streamlease.schema import (
    STREAM_ID_PATTERN,
    STREAM_ID_RULE,
)
from streamlease.settings import MAX_URL_CHARS
from streamlease.templates import (
    DEFAULT_ANSWER_TIMEOUT_SECONDS,
    MAX_ANSWER_TIMEOUT_SECONDS,
    MAX_CONTROL_CONDITIONS,
    MAX_OPEN_MESSAGES,
    MAX_PING_SECONDS,
    MIN_PING_SECONDS,
)
from streamlease.url_policy import URL_PATTERN, URL_RULE

PATTERN_RULES: Final = {STREAM_ID_PATTERN: STREAM_ID_RULE, URL_PATTERN: URL_RULE}
"""What each pattern of the schemas means, for users who never read a regular expression."""


_CONDITION_TEXT: Final = (
    "A JSON object an answer matches when it holds every key with an equal value (nested "
    "objects alike); an answer that is an array matches when one of its elements does."
)


class OpenMessageWait(BaseModel):
    """An open message that waits for its answer before the next one is sent."""

    model_config = ConfigDict(extra="forbid", strict=True)

    send: str = Field(
        min_length=1,
        max_length=MAX_OPEN_MESSAGE_CHARS,
        description="The message; {secret:<name>[#<key>]}, {next_seq}, {last_seq} replaced.",
        examples=['{"action":"auth","params":"{secret:streamlease/polygon#key}"}'],
    )
    expect: dict[str, Any] = Field(
        description=f"The answer that lets the sequence go on. {_CONDITION_TEXT}",
        examples=[{"status": "auth_success"}],
    )
    refuse: dict[str, Any] | None = Field(
        default=None,
        description="An answer that means no: the stream is rejected at once.",
        examples=[{"status": "auth_failed"}],
    )
    timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ANSWER_TIMEOUT_SECONDS,
        description=(
            f"How long to wait for the answer (default {DEFAULT_ANSWER_TIMEOUT_SECONDS}); "
            "none in time: the stream is rejected."
        ),
    )


class AppPingModel(BaseModel):
    """A message the upstream wants as proof of life."""

    model_config = ConfigDict(extra="forbid", strict=True)

    send: str = Field(min_length=1, max_length=MAX_OPEN_MESSAGE_CHARS, examples=['{"op":"ping"}'])
    interval_seconds: int = Field(ge=MIN_PING_SECONDS, le=MAX_PING_SECONDS, examples=[20])


class StreamProfile(BaseModel):
    """How to talk to the upstream; every field optional (none given: JSON text frames with an
    integer ``seq``, resumed by the ``from_seq`` query parameter). See docs/connecting-feeds.md,
    "The connection profile"."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=profile_rules)

    headers: dict[str, str] | None = Field(
        default=None,
        max_length=MAX_HEADERS,
        description=(
            "Handshake headers. A value may be literal or refer to a Secrets Manager secret: "
            "'secret:<name>' (the whole value) or '{secret:<name>}' inside it, '<name>#<key>' "
            "for one key of a JSON secret. Credentials (Authorization, Cookie, *token*, ...) "
            "must be secrets; a secret's value is never stored or shown. {next_seq} and "
            "{last_seq} are replaced by the resume point (resume: header)."
        ),
        examples=[{"Authorization": "Bearer {secret:streamlease/feed#token}"}],
    )
    query: dict[str, str] | None = Field(
        default=None,
        description=(
            "Query parameters added on every connect; {next_seq} and {last_seq} are replaced by "
            "the resume point (resume: query). No credentials."
        ),
        examples=[{"after": "{last_seq}"}],
    )
    subprotocols: list[str] | None = Field(
        default=None, max_length=MAX_SUBPROTOCOLS, description="Offered subprotocols."
    )
    open_message: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_OPEN_MESSAGE_CHARS,
        description=(
            "A text frame sent after every (re)connect, e.g. a subscribe message; {next_seq} and "
            "{last_seq} are replaced by the resume point. Shorthand for one open_messages entry."
        ),
        examples=['{"type":"subscribe","channel":"ticker","from":{next_seq}}'],
    )
    open_messages: list[str | OpenMessageWait] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_OPEN_MESSAGES,
        description=(
            "Messages sent in order after every (re)connect (a login, then a subscribe). Each "
            "may hold {secret:<name>[#<key>]} (never a credential written out), {next_seq} and "
            "{last_seq}; one given as an object waits for its answer first."
        ),
    )
    seq: str | None = Field(
        default=None,
        max_length=600,
        description=(
            "Where each message's sequence number is: a dotted JSON path (seq, sequence, "
            "data.u), or none (the worker numbers messages; text and binary frames alike)."
        ),
        examples=["data.u"],
    )
    resume: Literal["query", "header", "open_message", "none"] | None = Field(
        default=None,
        description=(
            "Where a reconnect states its resume point: the query, a header, the open "
            "messages, or none."
        ),
    )
    resume_param: str | None = Field(
        default=None,
        max_length=64,
        description="Shorthand for resume by query: this parameter asks for last_seq + 1.",
    )
    ping: AppPingModel | None = Field(
        default=None, description="A message sent every interval_seconds while connected."
    )
    control: list[dict[str, Any]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CONTROL_CONDITIONS,
        description=(
            "Frames matching one of these conditions are control frames (pongs, heartbeats): "
            f"skipped and counted apart from malformed ones. {_CONDITION_TEXT}"
        ),
        examples=[[{"op": "pong"}]],
    )
    idle_seconds: int | None = Field(
        default=None,
        ge=MIN_IDLE_SECONDS,
        le=MAX_IDLE_SECONDS,
        description=(
            f"Seconds a connected stream may go without a frame before it shows as stalled"
            f" (default {DEFAULT_IDLE_SECONDS})."
        ),
        examples=[300],
    )


class CreateStream(BaseModel):
    """``POST /streams``: the stream to create and start."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=create_rules)

    id: str = Field(
        pattern=STREAM_ID_PATTERN,
        description=f"Stream id: {STREAM_ID_RULE}.",
        examples=["btc-usd"],
    )
    ws_url: str = Field(
        min_length=1,
        max_length=MAX_URL_CHARS,
        pattern=URL_PATTERN,
        description=(
            f"Upstream WebSocket URL: {URL_RULE}; no credentials, no fragment, and a host the "
            "deployment allows (never a link-local, metadata or reserved address)."
        ),
        examples=["wss://feed.example.com/v1/ticker"],
    )
    profile: StreamProfile | None = Field(
        default=None, description="How to connect; omit for the default."
    )


class ChangeStream(BaseModel):
    """``PATCH /streams/{id}``: a new URL and/or connection profile for the stream."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=change_rules)

    ws_url: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_URL_CHARS,
        pattern=URL_PATTERN,
        description="The new upstream URL (the same rules as on create); omit to keep it.",
        examples=["wss://feed-2.example.com/v1/ticker"],
    )
    profile: StreamProfile | None = Field(
        default=None,
        description=(
            "The new connection profile, replacing the whole old one ({} for the default); "
            "omit to keep it."
        ),
    )
