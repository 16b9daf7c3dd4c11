"""The local API: HTTP requests turned into API Gateway REST proxy events for the real handler.

``python -m local.api_adapter`` serves ``lambdas.api.handler`` (decorators included) on
``Settings.local_host:local_api_port``. Each request becomes the event API Gateway's Lambda proxy
integration would send (REST API, payload format 1.0): ``resource`` and ``pathParameters`` from
the API's resource templates (the OpenAPI document the routes generate), the path as sent
(percent-encoded) with decoded path parameters, single- and multi-value headers, decoded query
parameters, the body (base64 when it is not UTF-8), an ``X-Amzn-Trace-Id`` as API Gateway
with tracing on sends it (the caller's if it has a valid root, else a new sampled trace), and a
request context with a fixed IAM identity standing in for the SigV4 caller. Like API Gateway,
an unknown resource or method (any method: ``TRACE``, ``CONNECT`` or one made up) is answered
with the JSON ``403 {"message": "Missing Authentication Token"}`` without calling the function;
locally the answer also says which routes there are (``hint``, ``routes``). A function that
fails or answers malformed output is a ``502``, and HTTP errors of its own (a malformed request
line) are JSON too, never an HTML page. A client that hangs up before its answer is written is
logged as such, without a traceback.

Pages of the local stack itself (``pages``: the dashboard, the stack's description) are served
beside the API's routes, by path, without calling the function.

The handler runs under one lock: one execution environment handles one event at a time, and the
Powertools resolver keeps per-event state on its module-level app.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import datetime as dt
import json
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from aws_xray_sdk.core.models.traceid import TraceId

from local.lambda_context import ACCOUNT_ID, LambdaContext
from streamlease.settings import Settings
from streamlease.telemetry import TRACE_HTTP_HEADER

Handler = Callable[[dict[str, Any], Any], Mapping[str, Any]]

API_ID: Final = "local"
STAGE: Final = "local"
MAX_PAYLOAD_BYTES: Final = 10 * 1024 * 1024
"""API Gateway's request payload limit."""
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


# --- server ----------------------------------------------------------------------------------


class ApiAdapter:
    """Dispatches HTTP requests to ``handler`` the way API Gateway's proxy integration does."""

    def __init__(
        self,
        handler: Handler,
        resources: Sequence[Resource],
        *,
        stage: str = STAGE,
        pages: Mapping[str, Page] | None = None,
    ) -> None:
        self._handler = handler
        self._resources = list(resources)
        self._stage = stage
        self._pages = dict(pages or {})
        self._lock = threading.Lock()
        self._context_factory: Callable[[str], Any] = api_context

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """Answer one request: a local page, the handler's answer, 502 when the handler fails,
        or API Gateway's 403 for an unknown route (saying which routes there are)."""
        path = urlsplit(request.target).path
        page = self._pages.get(path) if request.method in ("GET", "HEAD") else None
        if page is not None:
            return page(request)
        found = find_resource(self._resources, request.method, path)
        if found is None:
            routes = route_list(self._resources, self._pages)
            return gateway_error(
                403,
                "Missing Authentication Token",
                hint=f"no route for {request.method} {path} (API Gateway answers an unknown "
                f"route with this 403); the routes are {', '.join(routes)}",
                routes=routes,
            )
        event = build_event(request, *found, stage=self._stage)
        try:
            with self._lock:
                result = self._handler(event, self._context_factory(request.request_id))
        except Exception:
            traceback.print_exc(file=sys.stderr)
            return gateway_error(502, "Internal server error")
        return response_from_proxy(result)


def api_context(request_id: str) -> LambdaContext:
    """The context of one API request: the API function's name and memory, and API Gateway's
    29 s integration timeout as its deadline."""
    return LambdaContext(
        "streamlease-api-local",
        aws_request_id=request_id,
        timeout_seconds=29.0,
        memory_limit_in_mb=512,
    )


def make_server(adapter: ApiAdapter, host: str, port: int) -> ThreadingHTTPServer:
    """A threaded HTTP server bound to ``host:port`` (``0`` picks a port). Raises ``OSError``."""

    class RequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "streamlease-local-api"
        # The status line and headers go out in one write and the body in another: with Nagle's
        # algorithm on, the body waited for the client's delayed ACK of the first (~40 ms on
        # every answer, measured on Linux loopback) on a kept-alive connection.
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            started = time.monotonic()
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_PAYLOAD_BYTES:
                response = gateway_error(413, "Request Too Long")
                self.close_connection = True
            else:
                body = self.rfile.read(length) if length > 0 else b""
                port = int(getattr(self.server, "server_port", 0))
                request = HttpRequest(
                    method=self.command,
                    target=self.path,
                    headers=list(self.headers.items()),
                    body=body,
                    source_ip=self.client_address[0],
                    host=self.headers.get("Host") or f"{host}:{port}",
                    port=port,
                )
                response = adapter.dispatch(request)
            outcome = ""
            try:
                self._send(response)
            except ConnectionError:  # the client hung up (Ctrl-C in `streamlease watch`)
                self.close_connection = True
                outcome = " (client hung up)"
            elapsed_ms = (time.monotonic() - started) * 1000
            # Never the query string: it may carry tokens.
            path = urlsplit(self.path).path
            sys.stderr.write(
                f"{self.command} {path} {response.status} {elapsed_ms:.0f}ms{outcome}\n"
            )

        def _send(self, response: HttpResponse) -> None:
            self.send_response(response.status)
            for name, value in response.headers:
                if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        def __getattr__(self, name: str) -> Any:
            # Every method goes through the adapter, as API Gateway takes any: TRACE, CONNECT
            # or an invented one reach no route and get its JSON 403, not http.server's 501.
            if name.startswith("do_"):
                return self._serve
            raise AttributeError(name)

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            """Errors of HTTP itself (a malformed request line, oversized headers) as JSON, the
            way API Gateway words its own errors: never an HTML page, never the input echoed."""
            self.close_connection = True
            if self.request_version == "HTTP/0.9":  # unparsed: still a full HTTP/1.1 answer
                self.request_version = "HTTP/1.1"
            try:
                phrase = HTTPStatus(code).phrase
            except ValueError:
                phrase = "Error"
            self._send(gateway_error(code, phrase))

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request is written by _serve, without the query string

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            # A client that hangs up mid-request is not an error of the server.
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    return Server((host, port), RequestHandler)


@contextlib.contextmanager
def serving(adapter: ApiAdapter, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """``adapter`` served on a thread of its own until the block ends; yields its base URL.
    Raises ``OSError`` when the address cannot be bound."""
    server = make_server(adapter, host, port)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the API until SIGINT/SIGTERM. Settings (table, queue, …) come from the environment."""
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(prog="python -m local.api_adapter", description=__doc__)
    parser.add_argument("--host", default=settings.local_host)
    parser.add_argument("--port", type=int, default=settings.local_api_port)
    parser.add_argument("--stage", default=STAGE, help="stage name put in the request context")
    args = parser.parse_args(argv)

    from lambdas.api import handler  # after the environment is final: it reads it at import
    from local.dashboard import dashboard_pages
    from local.stack_pages import stack_pages

    pages = {**stack_pages(settings), **dashboard_pages(settings)}
    adapter = ApiAdapter(handler, load_resources(), stage=args.stage, pages=pages)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        with serving(adapter, args.host, args.port) as url:
            print(f"local API ready at {url}", flush=True)
            stop.wait()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(f"local API: cannot listen on {args.host}:{args.port}: {reason}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
