"""What API Gateway's REST proxy integration makes of an HTTP request, and of the answer.

Pure: an :class:`HttpRequest` and the API's resources (from the OpenAPI document the routes
generate) in, the proxy event (payload format 1.0) out; the function's result in, the
:class:`HttpResponse` out. The local API (:mod:`local.api_adapter`) serves these over HTTP, and
the local stack's own pages (:mod:`local.dashboard`, :mod:`local.stack_pages`) answer with them.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from aws_xray_sdk.core.models.traceid import TraceId

from local.lambda_context import ACCOUNT_ID
from streamlease.telemetry import TRACE_HTTP_HEADER

API_ID: Final = "local"
STAGE: Final = "local"
OPENAPI_DOCUMENT: Final = Path(__file__).resolve().parents[1] / "lambdas" / "openapi.json"

LOCAL_IDENTITY: Final[dict[str, Any]] = {
    "cognitoIdentityPoolId": None,
    "cognitoIdentityId": None,
    "cognitoAuthenticationType": None,
    "cognitoAuthenticationProvider": None,
    "accountId": ACCOUNT_ID,
    "caller": "AIDALOCALOPERATOR00000",
    "user": "AIDALOCALOPERATOR00000",
    "userArn": f"arn:aws:iam::{ACCOUNT_ID}:user/local-operator",
    "accessKey": "AKIALOCALOPERATOR000",
    "principalOrgId": None,
    "apiKey": None,
    "apiKeyId": None,
    "clientCert": None,
}
"""Stands in for the IAM caller API Gateway would name after checking a SigV4 signature."""


# --- resources -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """An API Gateway resource: a path template such as ``/streams/{id}`` and its methods."""

    template: str
    methods: frozenset[str]

    @property
    def segments(self) -> tuple[str, ...]:
        """The template's path segments."""
        return tuple(part for part in self.template.split("/") if part)

    def match(self, segments: Sequence[str]) -> dict[str, str] | None:
        """Path parameters if ``segments`` (decoded) fit this template, else ``None``."""
        own = self.segments
        if len(own) != len(segments):
            return None
        parameters = {}
        for pattern, value in zip(own, segments, strict=True):
            if pattern.startswith("{") and pattern.endswith("}"):
                if not value:
                    return None
                parameters[pattern[1:-1]] = value
            elif pattern != value:
                return None
        return parameters


def resources_from_openapi(document: Mapping[str, Any]) -> list[Resource]:
    """The resources of an OpenAPI document: one per path, with its HTTP methods."""
    verbs = {"get", "put", "post", "delete", "patch", "head", "options"}
    return [
        Resource(path, frozenset(m.upper() for m in operations if m in verbs))
        for path, operations in document.get("paths", {}).items()
    ]


def load_resources(path: Path = OPENAPI_DOCUMENT) -> list[Resource]:
    """The API's resources from its OpenAPI document (kept in sync with the routes by a test)."""
    return resources_from_openapi(json.loads(path.read_text(encoding="utf-8")))


def find_resource(
    resources: Iterable[Resource], method: str, path: str
) -> tuple[Resource, dict[str, str]] | None:
    """The resource serving ``method path`` and its path parameters; literal segments win."""
    segments = [unquote(part) for part in path.removeprefix("/").removesuffix("/").split("/")]
    candidates = []
    for resource in resources:
        parameters = resource.match(segments)
        if parameters is not None and method in resource.methods:
            candidates.append((len(parameters), resource, parameters))
    if not candidates:
        return None
    _, resource, parameters = min(candidates, key=lambda c: c[0])
    return resource, parameters


# --- events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpRequest:
    """An HTTP request as received: ``target`` is the raw request target (path and query)."""

    method: str
    target: str
    headers: Sequence[tuple[str, str]]
    body: bytes
    source_ip: str
    host: str
    port: int
    received_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def _multi(pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, str], dict[str, list[str]]]:
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in pairs:
        single[name] = value  # API Gateway keeps the last value in the single-value map
        multi.setdefault(name, []).append(value)
    return single, multi


def _body(body: bytes) -> tuple[str | None, bool]:
    if not body:
        return None, False
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), True


def build_event(
    request: HttpRequest, resource: Resource, path_parameters: Mapping[str, str], *, stage: str
) -> dict[str, Any]:
    """The REST proxy event (payload 1.0) API Gateway sends for ``request`` on ``resource``."""
    parts = urlsplit(request.target)
    path = parts.path or "/"  # REST APIs pass the path percent-encoded as it was sent
    headers = [(n, v) for n, v in request.headers if not _foreign_trace_header(n, v)]
    present = {name.lower() for name, _ in headers}
    for name, value in (
        ("X-Forwarded-For", request.source_ip),
        ("X-Forwarded-Port", str(request.port)),
        ("X-Forwarded-Proto", "http"),
        (TRACE_HTTP_HEADER, f"Root={TraceId().to_id()};Sampled=1"),
    ):
        if name.lower() not in present:
            headers.append((name, value))
    single_headers, multi_headers = _multi(headers)
    query_pairs = parse_qsl(parts.query, keep_blank_values=True)
    single_query, multi_query = _multi(query_pairs)
    body, is_base64 = _body(request.body)
    user_agent = next((v for n, v in headers if n.lower() == "user-agent"), None)
    received = dt.datetime.fromtimestamp(request.received_at_ms / 1000, tz=dt.UTC)
    return {
        "resource": resource.template,
        "path": path,
        "httpMethod": request.method,
        "headers": single_headers,
        "multiValueHeaders": multi_headers,
        "queryStringParameters": single_query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": dict(path_parameters) or None,
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": API_ID,
            "domainName": request.host,
            "domainPrefix": request.host.split(".")[0],
            "extendedRequestId": request.request_id.replace("-", "")[:16],
            "httpMethod": request.method,
            "identity": {
                **LOCAL_IDENTITY,
                "sourceIp": request.source_ip,
                "userAgent": user_agent,
            },
            "path": path,
            "protocol": "HTTP/1.1",
            "requestId": request.request_id,
            "requestTime": received.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": request.received_at_ms,
            "resourceId": uuid.uuid5(uuid.NAMESPACE_URL, resource.template).hex[:6],
            "resourcePath": resource.template,
            "stage": stage,
        },
        "body": body,
        "isBase64Encoded": is_base64,
    }


_TRACE_ROOT: Final = re.compile(r"(?:^|;)\s*Root=1-[0-9a-f]{8}-[0-9a-f]{24}(?:;|$)")
"""An X-Ray trace header's root, which the X-Ray SDK's own header parser does not check."""


def _foreign_trace_header(name: str, value: str) -> bool:
    """True for an ``X-Amzn-Trace-Id`` without a valid root: API Gateway replaces such a header
    with one of its own (a new trace), and so does the local API."""
    return name.lower() == TRACE_HTTP_HEADER.lower() and not _TRACE_ROOT.search(value)


@dataclass(frozen=True)
class HttpResponse:
    """What goes back to the HTTP client."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def gateway_error(status: int, message: str, **extra: Any) -> HttpResponse:
    """An answer API Gateway itself would give (``{"message": ...}``), with ``extra`` keys."""
    body = json.dumps({"message": message, **extra}).encode()
    return HttpResponse(status, [("Content-Type", "application/json")], body)


def json_response(data: Any, status: int = 200) -> HttpResponse:
    """A JSON answer of the local stack's own pages."""
    body = json.dumps(data, separators=(",", ":")).encode()
    return HttpResponse(status, [("Content-Type", "application/json")], body)


Page = Callable[[HttpRequest], HttpResponse]
"""A page of the local stack itself (``GET`` only), served beside the API's routes."""


def route_list(resources: Iterable[Resource], pages: Iterable[str]) -> list[str]:
    """``GET /streams``, ``POST /streams``, ... and the local pages, for the hint of an unknown
    route."""
    routes = [
        f"{method} {resource.template}"
        for resource in resources
        for method in sorted(resource.methods)
    ]
    return [*routes, *(f"GET {path}" for path in pages)]


def response_from_proxy(result: Any) -> HttpResponse:
    """The HTTP response for a proxy integration result; malformed output is a 502."""
    if not isinstance(result, Mapping) or not isinstance(result.get("statusCode"), int):
        return gateway_error(502, "Internal server error")
    headers: list[tuple[str, str]] = []
    multi = result.get("multiValueHeaders") or {}
    for name, value in (result.get("headers") or {}).items():
        if name not in multi:
            headers.append((str(name), str(value)))
    for name, values in multi.items():
        headers.extend((str(name), str(v)) for v in values)
    raw = result.get("body") or ""
    try:
        body = (
            base64.b64decode(raw, validate=True) if result.get("isBase64Encoded") else raw.encode()
        )
    except (binascii.Error, AttributeError, ValueError):
        return gateway_error(502, "Internal server error")
    return HttpResponse(int(result["statusCode"]), headers, body)
