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
import contextlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import urlsplit

from local.dashboard import dashboard_pages
from local.gateway_events import (
    STAGE,
    HttpRequest,
    HttpResponse,
    Page,
    Resource,
    build_event,
    find_resource,
    gateway_error,
    load_resources,
    response_from_proxy,
    route_list,
)
from local.lambda_context import LambdaContext
from local.stack_pages import stack_pages
from streamlease.settings import Settings

Handler = Callable[[dict[str, Any], Any], Mapping[str, Any]]

MAX_PAYLOAD_BYTES: Final = 10 * 1024 * 1024
"""API Gateway's request payload limit."""


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
