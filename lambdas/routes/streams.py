"""``/streams`` routes: create, start, stop, change, get, list, delete (architecture §6).

Writes are conditional (see :mod:`lambdas.stream_repo`); after a write that wants the stream
running, a START hint goes to SQS. Idempotent repeats answer 200 and change nothing: creating
the same id with the same URL, stopping a STOPPED stream, starting a STARTED one (which re-sends
the START hint, harmless and useful when an earlier hint was lost).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from lambdas import runtime
from lambdas.api_models import ErrorBody, StreamList, StreamView
from lambdas.api_requests import ChangeStream, CreateStream, StreamProfile
from lambdas.commands import send_command, start_command
from lambdas.http_errors import ApiError
from lambdas.identity import caller_identity
from lambdas.metrics import MetricEmitter
from lambdas.pagination import MAX_TOKEN_CHARS, TokenInvalid, decode_token, encode_token
from lambdas.secret_check import missing_secret_warnings
from lambdas.tracing import command_trace_header
from streamlease.errors import UrlRejected
from streamlease.lease_store import wall_ms
from streamlease.model import Stream, WorkerInfo
from streamlease.profile import Profile, ProfileError, parse_profile
from streamlease.profile_fields import credential_parameter, refuse_credential_parameter
from streamlease.schema import STREAM_ID_PATTERN, STREAM_ID_RULE, ConnectionState, DesiredState
from streamlease.settings import MAX_PAGE_SIZE
from streamlease.telemetry import API_SERVICE, ApiMetric
from streamlease.templates import TemplateError
from streamlease.url_policy import FIELD, parse_upstream_url

router = Router()
logger = Logger(service=API_SERVICE, child=True)
metrics = MetricEmitter(API_SERVICE)

StreamId = Annotated[
    str,
    Path(
        pattern=STREAM_ID_PATTERN,
        description=f"Stream id: {STREAM_ID_RULE}.",
        examples=["btc-usd"],
    ),
]

_JSON: Final = content_types.APPLICATION_JSON


def _errors(*statuses: HTTPStatus) -> dict[int, Any]:
    return {
        int(s): {"description": s.phrase, "content": {_JSON: {"model": ErrorBody}}}
        for s in statuses
    }


def _stream_response(status: HTTPStatus, description: str) -> dict[int, Any]:
    return {int(status): {"description": description, "content": {_JSON: {"model": StreamView}}}}


def _sessions_of(streams: list[Stream]) -> dict[str, WorkerInfo]:
    """The worker items of the sessions that hold some of ``streams`` (one batch read, only
    when a lease is attached to a session): such a lease lasts as long as its session, and its
    checkpoint rides on the session's renewals."""
    owners = {s.owner for s in streams if s.held_by_session and s.owner}
    return runtime.current().sessions.read_many(owners) if owners else {}


def _view(stream: Stream, sessions: dict[str, WorkerInfo], now_ms: int) -> StreamView:
    lease_ms = runtime.current().settings.lease_ms
    return StreamView.of(stream, now_ms, sessions.get(stream.owner or ""), lease_ms=lease_ms)


def _reply(status: HTTPStatus, stream: Stream, warnings: list[str] | None = None) -> Response[Any]:
    view = _view(stream, _sessions_of([stream]), wall_ms())
    view.warnings = warnings or []
    return Response(status_code=int(status), content_type=_JSON, body=view.model_dump_json())


def _hint_start(stream: Stream) -> None:
    rt = runtime.current()
    send_command(
        rt.sqs,
        rt.settings.queue_url,
        start_command(stream.stream_id, stream.generation),
        logger=logger,
        on_failure=lambda name: metrics.emit({name: 1}),
        trace_header=command_trace_header(router.current_event.headers),
    )


@router.post(
    "/streams",
    summary="Create and start a stream",
    description=(
        "Creates the stream STARTED (201). The same id with the same ws_url again changes "
        "nothing (200); the same id with another ws_url is a conflict (409)."
    ),
    operation_id="createStream",
    tags=["streams"],
    responses={
        **_stream_response(HTTPStatus.CREATED, "Created and started"),
        **_stream_response(HTTPStatus.OK, "Already exists with this ws_url; unchanged"),
        **_errors(
            HTTPStatus.BAD_REQUEST,
            HTTPStatus.CONFLICT,
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            HTTPStatus.SERVICE_UNAVAILABLE,
        ),
    },
)
def create_stream(body: CreateStream) -> Response[Any]:
    """Create ``body.id`` with ``body.ws_url`` after the URL policy accepted the URL."""
    rt = runtime.current()
    _check_url(body.ws_url)
    parsed = None if body.profile is None else _parsed_profile(body.profile)
    profile = None if parsed is None else parsed.to_item()
    stream, created = rt.repo.create(
        body.id, body.ws_url, caller_identity(router.current_event), profile
    )
    if created:
        logger.info("stream created", stream_id=stream.stream_id)
        metrics.emit({ApiMetric.STREAMS_CREATED: 1})
    if stream.desired_state is DesiredState.STARTED:
        _hint_start(stream)
    return _reply(HTTPStatus.CREATED if created else HTTPStatus.OK, stream, _warnings(parsed))


def _warnings(profile: Profile | None) -> list[str]:
    """What will fail unless fixed, for the answer: secrets the profile names that do not
    exist (see :mod:`lambdas.secret_check`)."""
    if profile is None or not profile.secrets:
        return []
    return missing_secret_warnings(runtime.current().secretsmanager, profile.secrets)


def _check_url(ws_url: str) -> None:
    """The URL policy, then the rule ``profile.query`` follows for the URL's own query: no
    parameter named for a credential (a 400 naming it)."""
    parse_upstream_url(ws_url, runtime.current().url_policy)
    name = credential_parameter(ws_url)
    if name is not None:
        try:
            refuse_credential_parameter(name, FIELD)
        except TemplateError as exc:
            raise UrlRejected(f"{FIELD} query parameter {exc}", FIELD) from None


def _parsed_profile(profile: StreamProfile) -> Profile:
    """The profile once the profile rules accepted it (a 400 naming the field otherwise)."""
    try:
        return parse_profile(
            profile.model_dump(exclude_none=True),
            secrets_prefix=runtime.current().settings.secrets_prefix,
        )
    except ProfileError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, "invalid_profile", str(exc), exc.field) from None


@router.patch(
    "/streams/<id>",
    summary="Change a stream's URL or profile in place",
    description=(
        "Replaces the ws_url and/or the whole connection profile (validated as on create) and "
        "sets generation + 1 (202): the stream keeps its last_seq, and its holder reconnects "
        "with the new settings from its checkpoint at its next renewal. The same settings "
        "again change nothing (200, same generation)."
    ),
    operation_id="changeStream",
    tags=["streams"],
    responses={
        **_stream_response(HTTPStatus.ACCEPTED, "Change accepted"),
        **_stream_response(HTTPStatus.OK, "Already so; unchanged"),
        **_errors(
            HTTPStatus.BAD_REQUEST,
            HTTPStatus.NOT_FOUND,
            HTTPStatus.CONFLICT,
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            HTTPStatus.SERVICE_UNAVAILABLE,
        ),
    },
)
def change_stream(id: StreamId, body: ChangeStream) -> Response[Any]:
    """Change ``id``'s URL and/or profile."""
    rt = runtime.current()
    if body.ws_url is None and body.profile is None:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, "invalid_request", "give ws_url, profile or both", "body"
        )
    if body.ws_url is not None:
        _check_url(body.ws_url)
    parsed = None if body.profile is None else _parsed_profile(body.profile)
    profile = None if parsed is None else parsed.to_item()
    stream, changed = rt.repo.change(
        id, caller_identity(router.current_event), ws_url=body.ws_url, profile=profile
    )
    if changed:
        logger.info("stream changed", stream_id=id, generation=stream.generation)
        if stream.desired_state is DesiredState.STARTED and stream.owner is None:
            _hint_start(stream)
    return _reply(HTTPStatus.ACCEPTED if changed else HTTPStatus.OK, stream, _warnings(parsed))


@router.post(
    "/streams/<id>/stop",
    summary="Stop a stream",
    description=(
        "Sets desired_state STOPPED and generation + 1 (202); the owner closes the upstream at "
        "its next renewal. Already STOPPED: unchanged (200)."
    ),
    operation_id="stopStream",
    tags=["streams"],
    responses={
        **_stream_response(HTTPStatus.ACCEPTED, "Stop accepted"),
        **_stream_response(HTTPStatus.OK, "Already stopped; unchanged"),
        **_errors(HTTPStatus.BAD_REQUEST, HTTPStatus.NOT_FOUND, HTTPStatus.SERVICE_UNAVAILABLE),
    },
)
def stop_stream(id: StreamId) -> Response[Any]:
    """Stop ``id``."""
    rt = runtime.current()
    stream, changed = rt.repo.set_desired_state(
        id, DesiredState.STOPPED, caller_identity(router.current_event)
    )
    if changed:
        logger.info("stream stopped", stream_id=id, generation=stream.generation)
    return _reply(HTTPStatus.ACCEPTED if changed else HTTPStatus.OK, stream)


@router.post(
    "/streams/<id>/start",
    summary="Start a stopped stream again",
    description=(
        "Sets desired_state STARTED and generation + 1 (202) and sends a START hint. Already "
        "STARTED: unchanged (200), the hint is sent again."
    ),
    operation_id="startStream",
    tags=["streams"],
    responses={
        **_stream_response(HTTPStatus.ACCEPTED, "Start accepted"),
        **_stream_response(HTTPStatus.OK, "Already started; unchanged"),
        **_errors(HTTPStatus.BAD_REQUEST, HTTPStatus.NOT_FOUND, HTTPStatus.SERVICE_UNAVAILABLE),
    },
)
def start_stream(id: StreamId) -> Response[Any]:
    """Start ``id``."""
    rt = runtime.current()
    stream, changed = rt.repo.set_desired_state(
        id, DesiredState.STARTED, caller_identity(router.current_event)
    )
    if changed:
        logger.info("stream started", stream_id=id, generation=stream.generation)
    _hint_start(stream)
    return _reply(HTTPStatus.ACCEPTED if changed else HTTPStatus.OK, stream)


@router.get(
    "/streams/<id>",
    summary="Read a stream",
    description="Who owns it, since when, how far it got and what went wrong last.",
    operation_id="getStream",
    tags=["streams"],
    responses={
        **_stream_response(HTTPStatus.OK, "The stream"),
        **_errors(HTTPStatus.BAD_REQUEST, HTTPStatus.NOT_FOUND, HTTPStatus.SERVICE_UNAVAILABLE),
    },
)
def get_stream(id: StreamId) -> Response[Any]:
    """Read ``id`` consistently."""
    return _reply(HTTPStatus.OK, runtime.current().repo.get(id))


@router.get(
    "/streams",
    summary="List streams",
    description=(
        "One page of streams in stream-id order, optionally only those in one desired state "
        "(without a filter: STARTED streams, then STOPPED ones). With connection_state, only "
        "the streams whose holder reports that state (e.g. rejected, stalled), in index order "
        "rather than id order. Pass next_token back unchanged, with the same filters, for the "
        "next page; it is opaque and null after the last page. A page may be shorter than "
        "limit (even empty) while next_token is not null. An unknown query parameter is a 400."
    ),
    operation_id="listStreams",
    tags=["streams"],
    responses={
        200: {"description": "One page", "content": {_JSON: {"model": StreamList}}},
        **_errors(HTTPStatus.BAD_REQUEST, HTTPStatus.SERVICE_UNAVAILABLE),
    },
)
def list_streams(
    state: Annotated[DesiredState | None, Query(description="Only streams in this state.")] = None,
    connection_state: Annotated[
        ConnectionState | None,
        Query(description="Only streams whose connection is in this state (e.g. rejected)."),
    ] = None,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_PAGE_SIZE,
            description=f"Page size: at most {MAX_PAGE_SIZE}, which a deployment's "
            "page_size_max setting may lower; left out: the most.",
        ),
    ] = None,
    next_token: Annotated[
        str | None,
        Query(
            max_length=MAX_TOKEN_CHARS,
            description=(
                "Opaque: the next_token of the previous page, passed back unchanged with the "
                "same filters."
            ),
        ),
    ] = None,
) -> Response[Any]:
    """List streams, ``limit`` at a time."""
    rt = runtime.current()
    page_max = rt.settings.page_size_max
    if limit is not None and limit > page_max:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, "invalid_request", f"limit must be at most {page_max}", "limit"
        )
    position = None
    if next_token:
        try:
            position = decode_token(next_token, state, connection_state)
        except TokenInvalid as exc:
            raise ApiError(
                HTTPStatus.BAD_REQUEST, "invalid_request", str(exc), "next_token"
            ) from None
    page = rt.listing.page(state, limit or page_max, position, connection_state)
    now = wall_ms()
    sessions = _sessions_of(page.streams)
    body = StreamList(
        streams=[_view(s, sessions, now) for s in page.streams],
        next_token=None if page.next is None else encode_token(page.next),
    )
    return Response(status_code=200, content_type=_JSON, body=body.model_dump_json())


@router.delete(
    "/streams/<id>",
    summary="Delete a stopped stream",
    description="Only a STOPPED stream that no worker holds can be deleted (204).",
    operation_id="deleteStream",
    tags=["streams"],
    responses={
        204: {"description": "Deleted; no body", "content": {}},
        **_errors(
            HTTPStatus.BAD_REQUEST,
            HTTPStatus.NOT_FOUND,
            HTTPStatus.CONFLICT,
            HTTPStatus.SERVICE_UNAVAILABLE,
        ),
    },
)
def delete_stream(id: StreamId) -> Response[Any]:
    """Delete ``id``."""
    runtime.current().repo.delete(id)
    logger.info("stream deleted", stream_id=id, deleted_by=caller_identity(router.current_event))
    return Response(status_code=204)
