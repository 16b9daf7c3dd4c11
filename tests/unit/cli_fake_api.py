"""A tiny recording HTTP server standing in for the streamlease API, and a way to run the CLI.

``FakeApi.routes[(method, path)]`` is ``(status, body)`` or a function of the request giving
one; every request is recorded with the client port it came from (one port per connection, so
keep-alive shows as fewer ports than requests) and the most requests seen in flight at once.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from streamlease.cli import main

Answer = tuple[int, Any]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int = 0


@dataclass
class FakeApi:
    """Answers from ``routes``; records every request."""

    port: int
    routes: dict[tuple[str, str], Answer | Callable[[Recorded], Answer]] = field(
        default_factory=dict
    )
    requests: list[Recorded] = field(default_factory=list)
    delay_seconds: float = 0.0
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """Distinct TCP connections the requests came over."""
        return len({r.client_port for r in self.requests})

    def answer(self, request: Recorded) -> Answer:
        route = self.routes.get(
            (request.method, request.path.split("?")[0]),
            (404, {"error": {"code": "not_found", "message": "no route", "field": None}}),
        )
        return route(request) if callable(route) else route


@contextmanager
def serve_fake_api() -> Iterator[FakeApi]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    fake = FakeApi(port=server.server_address[1])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as API Gateway and the local adapter
        disable_nagle_algorithm = True  # the body is a second write (see local/api_adapter.py)

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = Recorded(
                self.command, self.path, dict(self.headers), body, self.client_address[1]
            )
            with fake.lock:
                fake.requests.append(request)
                fake.in_flight += 1
                fake.most_in_flight = max(fake.most_in_flight, fake.in_flight)
            try:
                time.sleep(fake.delay_seconds)
                status, payload = fake.answer(request)
            finally:
                with fake.lock:
                    fake.in_flight -= 1
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


class Terminal(io.StringIO):
    """Captured output that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def run(
    *argv: str,
    transport: Any = None,
    stdin: str = "",
    environ: dict[str, str] | None = None,
    terminal: bool = False,
) -> tuple[int, str, str]:
    """The CLI with ``argv``; returns (exit code, stdout, stderr)."""
    out: io.StringIO = Terminal() if terminal else io.StringIO()
    err = io.StringIO()
    code = main(
        list(argv),
        transport=transport,
        stdout=out,
        stderr=err,
        stdin=io.StringIO(stdin),
        environ=environ,
    )
    return code, out.getvalue(), err.getvalue()
