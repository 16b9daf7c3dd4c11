"""The REST API Lambda: ``handler`` is the API Gateway (REST, proxy) entry point.

The local stack calls the same ``handler`` with synthetic proxy events and a Lambda context of
its own (:mod:`local.lambda_context`).
"""

from __future__ import annotations

import functools
import re
import string
import threading
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas import http_errors, runtime
from lambdas.http_errors import ApiError
from lambdas.routes import streams, workers
from lambdas.tracing import tracer
from streamlease.telemetry import API_SERVICE

logger = Logger(service=API_SERVICE, level=runtime.current().settings.log_level)

app = APIGatewayRestResolver(enable_validation=True)
app.include_router(streams.router)
app.include_router(workers.router)
http_errors.register(app)


@functools.cache
def query_parameters() -> dict[tuple[str, str], frozenset[str]]:
    """(method, route in OpenAPI form) → the query parameters the route declares, read from
    the OpenAPI document the routes generate (so a new parameter needs no second list)."""
    from aws_lambda_powertools.event_handler.openapi.models import (
        Operation,
        Parameter,
        ParameterInType,
    )

    known: dict[tuple[str, str], frozenset[str]] = {}
    for path, item in (app.get_openapi_schema().paths or {}).items():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if isinstance(operation, Operation):
                known[(method.upper(), path)] = frozenset(
                    p.name
                    for p in operation.parameters or []
                    if isinstance(p, Parameter) and p.in_ is ParameterInType.query
                )
    return known


def refuse_unknown_query_parameters(
    resolver: APIGatewayRestResolver, next_middleware: NextMiddleware
) -> Response[Any]:
    """A query parameter the route does not declare is a 400 naming it, on every route.

    Ignoring it would be worse than any error: ``GET /streams?conection_state=rejected``
    would list every stream, and a script that stops what a filter lists would stop them all.
    """
    event = resolver.current_event
    given = set(event.query_string_parameters or {})
    given |= set(event.multi_value_query_string_parameters or {})
    if given:
        request = resolver.request
        declared = query_parameters().get((request.method, request.route), frozenset())
        unknown = sorted(given - declared)
        if unknown:
            name = http_errors.field_name(unknown[0])
            takes = ", ".join(sorted(declared)) or "none"
            raise ApiError(
                HTTPStatus.BAD_REQUEST,
                "invalid_request",
                f"unknown query parameter {name!r}; this route takes: {takes}",
                name,
            )
    return next_middleware(resolver)


@functools.cache
def routes_without_body() -> frozenset[tuple[str, str]]:
    """(method, route in OpenAPI form) of the routes that declare no request body, read from
    the OpenAPI document the routes generate."""
    from aws_lambda_powertools.event_handler.openapi.models import Operation

    bare: set[tuple[str, str]] = set()
    for path, item in (app.get_openapi_schema().paths or {}).items():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if isinstance(operation, Operation) and operation.requestBody is None:
                bare.add((method.upper(), path))
    return frozenset(bare)


def refuse_unknown_body_fields(
    resolver: APIGatewayRestResolver, next_middleware: NextMiddleware
) -> Response[Any]:
    """A route that takes no body refuses a body with anything in it: a 400 naming the first
    field (routes with a body refuse unknown fields through their model). An empty body or
    ``{}`` is no body: clients send it with a POST.

    ``stop`` with ``{"force": true}`` accepted and ignored would tell the caller it was heard.
    """
    request = resolver.request
    if (request.method, request.route) in routes_without_body():
        body = _body_of(resolver)
        if body not in (None, {}):
            if isinstance(body, dict):
                name = http_errors.field_name(str(sorted(body)[0]))
                message = f"unknown field {name!r}; this route takes no body"
            else:
                name, message = "body", "this route takes no body"
            raise ApiError(HTTPStatus.BAD_REQUEST, "invalid_request", message, name)
    return next_middleware(resolver)


def _body_of(resolver: APIGatewayRestResolver) -> Any:
    """The request's JSON body; None when empty; a non-JSON body as its text."""
    event = resolver.current_event
    if not event.body:
        return None
    try:
        return event.json_body
    except ValueError:
        return event.body


app.use(middlewares=[refuse_unknown_query_parameters, refuse_unknown_body_fields])


_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_ID_CHARS = frozenset(string.ascii_letters + string.digits + "._:-")


def with_plain_path(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with percent-escapes of stream-id characters in ``path`` decoded.

    REST APIs pass the path still percent-encoded (a client may send ``a%3Ab`` for ``a:b``).
    Only characters a stream id may contain are decoded, so an escaped ``/`` or ``?`` can never
    change which route matches.
    """
    path = event.get("path")
    if not isinstance(path, str) or "%" not in path:
        return event

    def decode(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _ID_CHARS else match.group(0)

    return {**event, "path": _ESCAPE.sub(decode, path)}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
# Responses carry streams' upstream URLs: they stay out of the trace's metadata.
@tracer.capture_lambda_handler(capture_response=False)
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    refused = http_errors.precheck(event, runtime.current().settings.max_body_bytes)
    if refused is not None:
        return refused
    return app.resolve(with_plain_path(event), context)


# The resolver keeps the request being answered in shared state (current event, route
# arguments), as Lambda runs one request per process at a time. Callers that use threads (the
# local stack's HTTP server) are served one request at a time too; on Lambda the lock is free.
_one_request_at_a_time = threading.Lock()


def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Answer one API Gateway REST proxy event with a proxy response. Thread-safe."""
    with _one_request_at_a_time:
        response: dict[str, Any] = _handle(event, context)
    return response
