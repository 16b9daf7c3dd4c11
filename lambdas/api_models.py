"""Request and response bodies of the REST API (pydantic models; the OpenAPI schemas)."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.api_schema_rules import change_rules, create_rules, profile_rules
from streamlease import seqs
from streamlease.live_progress import live_progress
from streamlease.model import Stream, WorkerInfo, iso_ms
from streamlease.profile import (
    DEFAULT_IDLE_SECONDS,
    MAX_HEADERS,
    MAX_IDLE_SECONDS,
    MAX_OPEN_MESSAGE_CHARS,
    MAX_SUBPROTOCOLS,
    MIN_IDLE_SECONDS,
    SEQ_NONE,
)
from streamlease.profile_fields import masked_url
from streamlease.schema import (
    STREAM_ID_PATTERN,
    STREAM_ID_RULE,
    ConnectionState,
    DesiredState,
    Liveness,
    WorkerState,
)
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

NO_SEQUENCE_NOTE: Final = (
    "the upstream has no sequence: the worker numbers messages, and a failover can lose or "
    "repeat what the upstream does not replay"
)

MAX_WS_URL_CHARS: Final = 2048
"""Schema bound on ``ws_url``; the URL policy's ``max_url_length`` setting may be stricter."""


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
        max_length=MAX_WS_URL_CHARS,
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
        max_length=MAX_WS_URL_CHARS,
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


class StreamView(BaseModel):
    """A stream as an operator reads it: who owns it, since when, how far it got, last error."""

    id: str
    ws_url: str = Field(
        description="The upstream URL; the value of a query parameter named for a credential "
        "(stored before such URLs were refused) shows as ***."
    )
    desired_state: DesiredState
    owner: str | None = Field(description="Worker id holding the lease; null when free.")
    lease_state: str = Field(
        description="held, expired (the holder, or its session, missed renewals) or free."
    )
    lease_expires_at_ms: int = Field(
        description=(
            "Epoch ms when the lease lapses unless renewed (a session's lease: when the "
            "owner's session does); 0 when free."
        )
    )
    lease_remaining_ms: int = Field(description="Milliseconds left on the lease; 0 when none.")
    owned_since: str | None = Field(description="When the current owner acquired (ISO-8601).")
    epoch: int = Field(description="Fencing epoch: +1 on every acquisition.")
    last_seq: int | None = Field(
        description="Last upstream sequence number delivered to the sink, as of the last "
        "renewal of its lease (at most a heartbeat old) or its holder's last progress report, "
        "whichever is newer; null while nothing was delivered (a stream created by an earlier "
        "version, before it delivered anything, says 0)."
    )
    last_seq_at: str | None = Field(
        default=None,
        description="When last_seq was read by its holder (ISO-8601): the renewal or report "
        "that carried it; null when no holder reported one.",
    )
    msgs_per_s: float | None = Field(
        default=None,
        description="Delivered sequence numbers per second (messages, for a feed that numbers "
        "each one) between the holder's last progress report and its last renewal; null "
        "until the holding has two such readings at least a second apart.",
    )
    rate_since: str | None = Field(
        default=None,
        description="Start of the time msgs_per_s averages over (ISO-8601); it ends at "
        "last_seq_at.",
    )
    generation: int = Field(description="+1 on every desired_state change.")
    takeovers: int = Field(description="Acquisitions of a lease its holder did not release.")
    connection_state: ConnectionState | None = Field(
        description=(
            "How the holder's upstream connection is doing: connecting, connected, ended (the "
            "upstream finished it), or a trouble state in which nothing is delivered: retrying "
            "(reconnecting with backoff), rejected (the upstream refuses it: held, retried "
            "slowly), stalled (connected, but no frame for the stream's idle threshold), "
            "malformed (frames arrive, none deliverable; last_error says why) or sink_failing "
            "(the sink keeps refusing its records); null while nobody holds it."
        )
    )
    connection_since: str | None = Field(description="When the connection state last changed.")
    frames_received: int | None = Field(
        description="Frames received from the upstream during the current holding; null until "
        "its holder first reports (it reports with each connection-state change and at least "
        "every few minutes)."
    )
    frames_delivered: int | None = Field(
        description="Messages of the current holding the sink acknowledged."
    )
    frames_malformed: int | None = Field(
        description="Frames of the current holding that could not be delivered (no sequence "
        "number where the profile says, out of bounds, ...)."
    )
    frames_control: int | None = Field(
        description="Control frames of the current holding skipped as the profile's control "
        "conditions say (pongs, heartbeats): neither data nor malformed."
    )
    seq_gaps: int | None = Field(description="Sequence gaps seen during the current holding.")
    progress_at: str | None = Field(
        description="When the holder wrote the counts above (they may trail by a few minutes: "
        "they are not live, and not a rate)."
    )
    last_message_at: str | None = Field(
        description="When the last delivered message was received (as of the last report, by "
        "this holder or an earlier one); null when none was reported."
    )
    last_error: str | None
    last_error_at: str | None
    last_error_active: bool = Field(
        description="False once the stream has been connected since its last error."
    )
    profile: dict[str, Any] | None = Field(
        description="The connection profile as given (secret references, never their values)."
    )
    failover_note: str | None = Field(
        description="Set when a failover may lose or repeat messages (a feed with no sequence)."
    )
    created_at: str | None
    updated_at: str | None
    created_by: str | None
    updated_by: str | None
    warnings: list[str] = Field(
        default_factory=list,
        description="In the answer to a create or a change: what will fail unless fixed (a "
        "secret the profile refers to that does not exist yet; the stream is rejected until "
        "it does). Empty otherwise.",
    )

    @classmethod
    def of(
        cls,
        stream: Stream,
        now_ms: int,
        session: WorkerInfo | None = None,
        *,
        lease_ms: int,
    ) -> StreamView:
        """The view of ``stream`` at wall time ``now_ms``; ``session``: its owner's worker item
        when the lease is attached to a session (None: unknown or gone); ``lease_ms``: the
        lease length (a per-stream lease's last renewal is its expiry minus that)."""
        expires = stream.expires_at_ms
        if stream.held_by_session:
            expires = session.expires_at_ms if session is not None and session.is_live else 0
        # The live checkpoint rides on the renewals, not on the stream item's progress.
        live = live_progress(stream, session, lease_ms)
        remaining = max(0, expires - now_ms) if stream.owner else 0
        lease_state = "held" if remaining > 0 else "expired"
        if stream.owner is None:
            lease_state = "free"
        return cls(
            id=stream.stream_id,
            ws_url=masked_url(stream.ws_url),
            desired_state=stream.desired_state,
            owner=stream.owner,
            lease_state=lease_state,
            lease_expires_at_ms=expires if stream.owner else 0,
            lease_remaining_ms=remaining,
            owned_since=iso_ms(stream.acquired_at_ms)
            if stream.owner and stream.acquired_at_ms
            else None,
            epoch=stream.epoch,
            last_seq=seqs.delivered(live.seq),
            last_seq_at=None if live.seq_at_ms is None else iso_ms(live.seq_at_ms),
            msgs_per_s=None if live.rate_per_s is None else round(live.rate_per_s, 2),
            rate_since=None if live.rate_since_ms is None else iso_ms(live.rate_since_ms),
            generation=stream.generation,
            takeovers=stream.takeovers,
            connection_state=stream.connection_state,
            connection_since=stream.connection_since,
            **_progress_fields(stream),
            last_error=stream.last_error,
            last_error_at=stream.last_error_at,
            last_error_active=stream.last_error_active,
            profile=dict(stream.profile) if stream.profile else None,
            failover_note=NO_SEQUENCE_NOTE
            if (stream.profile or {}).get("seq") == SEQ_NONE
            else None,
            created_at=stream.created_at,
            updated_at=stream.updated_at,
            created_by=stream.created_by,
            updated_by=stream.updated_by,
        )


def _progress_fields(stream: Stream) -> dict[str, Any]:
    """The progress fields of a view: counts of the current holding only (an earlier holder's
    would be read as this one's), the last message of any."""
    current = stream.current_progress
    last = stream.progress.last_message_at_ms if stream.progress else None
    return {
        "frames_received": current.received if current else None,
        "frames_delivered": current.delivered if current else None,
        "frames_malformed": current.malformed if current else None,
        "frames_control": current.control if current else None,
        "seq_gaps": current.gaps if current else None,
        "progress_at": iso_ms(current.at_ms) if current else None,
        "last_message_at": iso_ms(last) if last else None,
    }


class StreamList(BaseModel):
    """``GET /streams``: one page; pass ``next_token`` back for the next (null at the end)."""

    streams: list[StreamView]
    next_token: str | None = Field(
        description="Opaque token for the next page (pass it back unchanged); null after the last."
    )


class WorkerView(BaseModel):
    """A live worker process (its session)."""

    id: str
    host: str
    pid: int
    task_arn: str = Field(description="ECS task ARN; empty outside ECS.")
    state: WorkerState
    liveness: Liveness = Field(description="session (the default) or stream.")
    stream_count: int = Field(description="Streams the worker reported holding.")
    capacity: int
    heartbeat_age_ms: int = Field(description="Milliseconds since the worker's last heartbeat.")
    version: str
    started_at: str | None

    @classmethod
    def of(cls, worker: WorkerInfo, now_ms: int) -> WorkerView:
        """The view of ``worker`` at wall time ``now_ms``."""
        return cls(
            id=worker.worker_id,
            host=worker.host,
            pid=worker.pid,
            task_arn=worker.task_arn,
            state=worker.state,
            liveness=worker.liveness,
            stream_count=worker.active_streams,
            capacity=worker.capacity,
            heartbeat_age_ms=max(0, now_ms - worker.heartbeat_at_ms),
            version=worker.version,
            started_at=iso_ms(worker.started_at_ms) if worker.started_at_ms else None,
        )


class WorkerList(BaseModel):
    """``GET /workers``: the live fleet."""

    workers: list[WorkerView]


class ErrorDetail(BaseModel):
    """What went wrong, and which request field caused it (null when no single field did)."""

    code: str
    message: str
    field: str | None


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer."""

    error: ErrorDetail
