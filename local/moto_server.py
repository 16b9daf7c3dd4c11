"""Our moto server: stock moto 5 made atomic where the lease protocol needs it.

The stock ``moto_server`` handles each request on its own thread without locking: racing
conditional ``UpdateItem``s on the same key can both succeed, concurrent SQS consumers receive the
same message inside its visibility timeout, and concurrent Kinesis puts overwrite each other's
records. Locking the whole server fixes that but lets one SQS long poll stall every other request
for its full wait. This server therefore:

- runs DynamoDB requests (``X-Amz-Target: DynamoDB…``) one at a time behind one lock, and
  Kinesis requests behind another, at the WSGI layer;
- serialises the SQS backend's methods, but does the long-poll *wait* outside that lock, so a
  ``ReceiveMessage`` waiting for 20 s blocks neither DynamoDB nor other SQS callers;
- splits Kinesis shards as Kinesis does (the parent keeps its records and takes no new ones);
- offers a fault switch for chaos tests at ``POST /_streamlease/faults`` with
  ``{"dynamodb": "up" | "down" | "drop" | "blackhole" | "slow"}``: ``down`` answers DynamoDB
  requests with HTTP 503 ``ServiceUnavailable``, ``drop`` closes their connection without an
  answer, ``blackhole`` holds them unanswered until the fault is lifted and then drops them
  (none of them is applied while the fault lasts); ``slow`` (with ``"delay_seconds"``) is a
  brownout: every request waits that long, then is applied. ``{"hold": {"match": [...],
  "delay_seconds": s, "count": n}}`` holds the next ``n`` DynamoDB requests whose target and
  body contain every ``match`` string for ``s`` seconds and then applies them — a write that
  lands after its client gave up (``"count": 0`` stops holding); a match of
  ``Kinesis_20131202.PutRecords`` holds Kinesis puts the same way (a slow sink). SQS and Kinesis
  keep working through the DynamoDB faults.

Run it in the foreground with ``python -m local.moto_server [--host H] [--port P]``, or from
another process with :class:`local.moto_process.MotoProcess`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from local.moto_patches import (
    reshard_as_kinesis_does,
    serialise_sqs_backend,
    stop_tracking_model_instances,
)

FAULTS_PATH: Final = "/_streamlease/faults"
FAULT_MODES: Final = ("up", "down", "drop", "blackhole", "slow")
READY_MARKER: Final = "moto server ready at"
EXIT_PORT_IN_USE: Final = 2
BLACKHOLE_MAX_SECONDS: Final = 60.0
"""A blackholed request is dropped after this long even if the fault is still on."""
MAX_DELAY_SECONDS: Final = 60.0
"""Longest brownout delay or hold the switch accepts."""

_DYNAMODB_TARGET: Final = "DynamoDB"
_KINESIS_TARGET: Final = "Kinesis_"

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass
class _Hold:
    """Requests to hold, then apply late (see the module docstring)."""

    match: tuple[bytes, ...]
    delay_seconds: float
    remaining: int
    waiting: int = 0
    applied: int = 0

    def take(self, body: bytes) -> float:
        """The delay for a request with ``body`` (0: not held), counting it down."""
        if self.remaining <= 0 or not all(m in body for m in self.match):
            return 0.0
        self.remaining -= 1
        return self.delay_seconds


class SerialisedApp:
    """WSGI middleware over moto's app: per-service locks and the DynamoDB fault switch."""

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self._dynamodb_lock = threading.Lock()
        self._kinesis_lock = threading.Lock()
        self._fault = "up"
        self._delay_seconds = 0.0
        self._hold = _Hold((), 0.0, 0)
        self._hold_lock = threading.Lock()
        self._fault_changed = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == FAULTS_PATH:
            return self._faults_endpoint(environ, start_response)
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        if target.startswith(_DYNAMODB_TARGET):
            return self._dynamodb(environ, start_response)
        if target.startswith(_KINESIS_TARGET):
            held = self._delay(environ, brownout=False)  # a slow sink: held, then applied
            try:
                with self._kinesis_lock:
                    return self._complete(environ, start_response)
            finally:
                if held:
                    with self._hold_lock:
                        self._hold.waiting -= 1
                        self._hold.applied += 1
        return self._app(environ, start_response)

    def _dynamodb(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        held = self._delay(environ)
        applied = False
        try:
            with self._dynamodb_lock:
                # Checked under the lock: once a fault is switched on, no queued request applies.
                fault = self._fault
                if fault in ("up", "slow"):
                    response = self._complete(environ, start_response)
                    applied = True
                    return response
            return self._refuse(fault, environ, start_response)
        finally:
            if held:
                # Counted once moto has applied it: whoever sees the count sees the write.
                with self._hold_lock:
                    self._hold.waiting -= 1
                    self._hold.applied += applied

    def _delay(self, environ: dict[str, Any], *, brownout: bool = True) -> bool:
        """Brownout (``brownout``: DynamoDB's) and held requests wait here, outside the lock,
        each in its own thread.

        Returns whether this request is a held one (counted as waiting until it is answered)."""
        delay = self._delay_seconds if brownout and self._fault == "slow" else 0.0
        if self._hold.remaining > 0:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(body)
            target = str(environ.get("HTTP_X_AMZ_TARGET", "")).encode()
            with self._hold_lock:
                held = self._hold.take(target + b"\n" + body)
                if held:
                    self._hold.waiting += 1
            if held:
                time.sleep(held)
                return True
        if delay:
            time.sleep(delay)
        return False

    def _complete(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        """Run moto's handler to the last byte of its body (inside the caller's lock)."""
        result = self._app(environ, start_response)
        try:
            return [b"".join(result)]
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    def _refuse(
        self, fault: str, environ: dict[str, Any], start_response: StartResponse
    ) -> list[bytes]:
        if fault == "down":
            body = json.dumps(
                {
                    "__type": "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
                    "message": "DynamoDB is down (fault injected)",
                }
            ).encode()
            start_response(
                "503 Service Unavailable",
                [
                    ("Content-Type", "application/x-amz-json-1.0"),
                    ("Content-Length", str(len(body))),
                ],
            )
            return [body]
        if fault == "blackhole":
            deadline = time.monotonic() + BLACKHOLE_MAX_SECONDS
            with self._fault_changed:
                self._fault_changed.wait_for(
                    lambda: self._fault != "blackhole" or time.monotonic() >= deadline,
                    timeout=BLACKHOLE_MAX_SECONDS,
                )
        connection = environ.get("werkzeug.socket")
        if connection is not None:
            with contextlib.suppress(OSError):  # the client may have gone first
                connection.shutdown(socket.SHUT_RDWR)
        start_response("503 Service Unavailable", [("Content-Length", "0")])
        return [b""]

    def set_fault(self, mode: str, delay_seconds: float = 0.0) -> None:
        """Switch the DynamoDB fault; returns once no request of the old mode is applying."""
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; expected one of {FAULT_MODES}")
        if not 0 <= delay_seconds <= MAX_DELAY_SECONDS:
            raise ValueError(f"delay_seconds must be between 0 and {MAX_DELAY_SECONDS}")
        with self._dynamodb_lock, self._fault_changed:
            self._fault = mode
            self._delay_seconds = delay_seconds if mode == "slow" else 0.0
            self._fault_changed.notify_all()

    def hold(self, match: list[str], delay_seconds: float, count: int) -> None:
        """Hold the next ``count`` requests containing every ``match`` string (see above);
        ``count`` 0 holds nothing more (requests already held still land when due)."""
        if count == 0:
            match, delay_seconds = [], 0.0
        elif not match or not all(isinstance(m, str) and m for m in match):
            raise ValueError("match must be a list of non-empty strings")
        elif not 0 < delay_seconds <= MAX_DELAY_SECONDS or count < 1:
            raise ValueError("delay_seconds must be in (0, 60] and count at least 1")
        with self._hold_lock:
            waiting, applied = self._hold.waiting, self._hold.applied
            self._hold = _Hold(
                tuple(m.encode() for m in match), delay_seconds, count, waiting, applied
            )

    def _faults_endpoint(
        self, environ: dict[str, Any], start_response: StartResponse
    ) -> list[bytes]:
        status = "200 OK"
        payload: dict[str, object] = {}
        if environ.get("REQUEST_METHOD") == "POST":
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                request = json.loads(environ["wsgi.input"].read(length) or b"{}")
                if not isinstance(request, dict):
                    raise ValueError("expected a JSON object")
                if "dynamodb" in request:
                    self.set_fault(
                        str(request["dynamodb"]), float(request.get("delay_seconds") or 0.0)
                    )
                if "hold" in request:
                    hold = request["hold"]
                    if not isinstance(hold, dict):
                        raise ValueError("hold must be an object")
                    self.hold(
                        list(hold.get("match") or []),
                        float(hold.get("delay_seconds") or 0.0),
                        int(hold.get("count", 1)),
                    )
            except (ValueError, TypeError) as exc:
                status, payload = "400 Bad Request", {"error": str(exc)}
        if not payload:
            payload = {
                "dynamodb": self._fault,
                "delay_seconds": self._delay_seconds,
                "held_waiting": self._hold.waiting,
                "held_applied": self._hold.applied,
            }
        body = json.dumps(payload).encode()
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]


def build_server(host: str, port: int) -> Any:
    """A threaded werkzeug server on ``host:port`` (0 = any free port) serving our moto app.

    Raises ``OSError`` when the address cannot be bound.
    """
    import logging

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    # One log line per request costs more than the request; errors still show.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    serialise_sqs_backend()
    reshard_as_kinesis_does()
    stop_tracking_model_instances()
    app = SerialisedApp(DomainDispatcherApplication(create_backend_app))
    # Bound here rather than by werkzeug, which prints its own advice and exits on EADDRINUSE.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(128)
        return make_server(
            host,
            port,
            app,
            threaded=True,
            request_handler=MotoRequestHandler,
            fd=listener.fileno(),
        )


def main(argv: list[str] | None = None) -> int:
    """Serve in the foreground until SIGINT or SIGTERM. Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m local.moto_server",
        description="moto server with atomic DynamoDB and SQS, and a DynamoDB fault switch",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5000, help="port; 0 picks a free one")
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when the process that started this one exits (used by MotoProcess)",
    )
    args = parser.parse_args(argv)

    parent = os.getppid()
    try:
        server = build_server(args.host, args.port)
    except OSError as exc:
        reason = "port in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        print(f"moto server: cannot listen on {args.host}:{args.port}: {reason}", file=sys.stderr)
        return EXIT_PORT_IN_USE

    stop_requested = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    serving = threading.Thread(target=server.serve_forever, name="moto-server", daemon=True)
    serving.start()
    host, port = server.server_address[:2]
    print(f"{READY_MARKER} http://{host}:{port}", flush=True)
    # Polled rather than blocking so signals and an orphaned child are noticed promptly.
    while not stop_requested.wait(0.2):
        if args.exit_with_parent and os.getppid() != parent:
            break
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
