"""Every error the API returns, mapped to HTTP in this one module.

Body: ``{"error": {"code", "message", "field"}}``. Client mistakes are 4xx and name the field at
fault; a store that does not answer is 503 (retry); anything unexpected is logged and is a 500.
:func:`precheck` rejects what must not even reach the router (oversized or non-JSON bodies);
:func:`register` installs the handlers for everything raised while routing.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from lambdas.api_requests import PATTERN_RULES
from lambdas.stream_repo import StreamConflict
from streamlease.errors import (
    StateConflict,
    StoreError,
    StreamleaseError,
    StreamNotFound,
    UrlRejected,
)
from streamlease.telemetry import API_SERVICE

logger = Logger(service=API_SERVICE, child=True)

RETRY_AFTER_SECONDS: Final = "1"
_MAX_REPORTED_ERRORS: Final = 3
_MAX_FIELD_CHARS: Final = 64
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


class ApiError(Exception):
    """A request the API refuses, raised by a route; carries its HTTP answer."""

    def __init__(
        self, status: HTTPStatus, code: str, message: str, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


def error_body(code: str, message: str, field: str | None) -> dict[str, Any]:
    """The JSON error document."""
    return {"error": {"code": code, "message": message, "field": field}}


def error_response(
    status: HTTPStatus, code: str, message: str, field: str | None = None
) -> Response[Any]:
    """A Powertools response carrying the error document."""
    headers = (
        {"Retry-After": RETRY_AFTER_SECONDS} if status == HTTPStatus.SERVICE_UNAVAILABLE else {}
    )
    return Response(
        status_code=int(status),
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(error_body(code, message, field)),
        headers=headers,
    )


# --- before routing ------------------------------------------------------------------------------


def precheck(event: Mapping[str, Any], max_body_bytes: int) -> dict[str, Any] | None:
    """Refuse a request the router should never parse; None lets it through.

    413 for a body over ``max_body_bytes``, 415 for a body that is not JSON by its content
    type, 400 for a body that is not parseable JSON (including nesting too deep to parse).
    Returns the API Gateway proxy response for a refusal.
    """
    try:
        raw = _body_bytes(event)
    except ApiError as exc:
        return _proxy(exc)
    if not raw:
        return None
    if len(raw) > max_body_bytes:
        return _proxy(
            ApiError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                "payload_too_large",
                f"request body is larger than {max_body_bytes} bytes",
                "body",
            )
        )
    method = str(event.get("httpMethod") or "").upper()
    if method not in _BODY_METHODS:
        return None
    content_type = _header(event, "content-type")
    if content_type and content_type.split(";", 1)[0].strip().lower() != "application/json":
        return _proxy(
            ApiError(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "request body must be application/json",
                "body",
            )
        )
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        return _proxy(
            ApiError(
                HTTPStatus.BAD_REQUEST, "invalid_json", "request body is not valid JSON", "body"
            )
        )
    return None


def _body_bytes(event: Mapping[str, Any]) -> bytes:
    body = event.get("body")
    if body is None or body == "":
        return b""
    if not isinstance(body, str):
        raise ApiError(HTTPStatus.BAD_REQUEST, "invalid_json", "request body is not text", "body")
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(
                HTTPStatus.BAD_REQUEST, "invalid_json", "request body is not valid base64", "body"
            ) from None
    return body.encode("utf-8", errors="surrogatepass")


def _header(event: Mapping[str, Any], name: str) -> str:
    headers = event.get("headers") or {}
    if isinstance(headers, Mapping):
        for key, value in headers.items():
            if isinstance(key, str) and key.lower() == name and isinstance(value, str):
                return value
    return ""


def _proxy(exc: ApiError) -> dict[str, Any]:
    return {
        "statusCode": int(exc.status),
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": json.dumps(error_body(exc.code, exc.message, exc.field)),
        "isBase64Encoded": False,
    }


# --- while routing -------------------------------------------------------------------------------


def register(app: APIGatewayRestResolver) -> None:
    """Install the exception and not-found handlers on ``app``."""

    @app.not_found
    def _not_found(_: Exception) -> Response[Any]:
        return error_response(HTTPStatus.NOT_FOUND, "route_not_found", "no such route", None)

    @app.exception_handler(RequestValidationError)
    def _invalid(exc: RequestValidationError) -> Response[Any]:
        field, message = describe_validation_errors(exc.errors())
        return error_response(HTTPStatus.BAD_REQUEST, "invalid_request", message, field)

    @app.exception_handler(RequestUnsupportedContentType)
    def _media_type(_: RequestUnsupportedContentType) -> Response[Any]:
        return error_response(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "request body must be application/json",
            "body",
        )

    @app.exception_handler(ApiError)
    def _api_error(exc: ApiError) -> Response[Any]:
        return error_response(exc.status, exc.code, exc.message, exc.field)

    @app.exception_handler(UrlRejected)
    def _url_rejected(exc: UrlRejected) -> Response[Any]:
        return error_response(HTTPStatus.BAD_REQUEST, "invalid_url", str(exc), exc.field)

    @app.exception_handler(StreamNotFound)
    def _missing(exc: StreamNotFound) -> Response[Any]:
        return error_response(HTTPStatus.NOT_FOUND, "not_found", str(exc), "id")

    @app.exception_handler(StateConflict)
    def _conflict(exc: StateConflict) -> Response[Any]:
        field = exc.field if isinstance(exc, StreamConflict) else None
        return error_response(HTTPStatus.CONFLICT, "conflict", str(exc), field)

    @app.exception_handler(StoreError)
    def _unavailable(exc: StoreError) -> Response[Any]:
        logger.warning("store unavailable", error=str(exc))
        return error_response(
            HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", "the table did not answer; retry", None
        )

    @app.exception_handler(ServiceError)
    def _service_error(exc: ServiceError) -> Response[Any]:
        status = HTTPStatus(exc.status_code)
        code = status.phrase.lower().replace(" ", "_")
        return error_response(status, code, str(exc.msg), None)

    @app.exception_handler(StreamleaseError)
    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response[Any]:
        logger.exception("unhandled error", error_type=type(exc).__name__)
        return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error", None)


def field_name(name: str) -> str:
    """A field or parameter name as an error names it: cut to a bounded length (it may be
    anything a client sent)."""
    return name if len(name) <= _MAX_FIELD_CHARS else name[:_MAX_FIELD_CHARS] + "..."


def describe_validation_errors(errors: Sequence[Any]) -> tuple[str | None, str]:
    """``(field, message)`` for pydantic-style errors: the first field at fault, all messages.

    Locations like ``("body", "ws_url")`` name the field ``ws_url``, nested ones a dotted path
    (``profile.headers.Authorization``); a whole-body problem names ``body``. A pattern is said
    in words, never shown as a regular expression. Input values are never echoed (they may hold
    secrets).
    """
    parts: list[str] = []
    first: str | None = None
    for error in list(errors)[:_MAX_REPORTED_ERRORS]:
        loc = [str(p) for p in (error.get("loc") or ()) if not isinstance(p, int)]
        field = ".".join(loc[1:]) if len(loc) > 1 else (loc[0] if loc else None)
        if field is not None:
            field = field_name(field)
        kind = error.get("type", "")
        if kind == "extra_forbidden":
            text = "unknown field"
        elif kind == "missing":
            text = "required"
        elif kind == "json_invalid":
            field, text = "body", "request body is not valid JSON"
        elif kind == "string_pattern_mismatch":
            rule = PATTERN_RULES.get(str((error.get("ctx") or {}).get("pattern")))
            text = f"must be {rule}" if rule else "has the wrong form"
        else:
            text = str(error.get("msg", "invalid value"))
        first = first if first is not None else field
        parts.append(f"{field}: {text}" if field else text)
    if len(errors) > _MAX_REPORTED_ERRORS:
        parts.append(f"and {len(errors) - _MAX_REPORTED_ERRORS} more")
    return first, "; ".join(parts) or "invalid request"
