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
- offers a fault switch for chaos tests at ``POST /_streamlease/faults`` with
  ``{"dynamodb": "up" | "down" | "drop" | "blackhole"}``: ``down`` answers DynamoDB requests with
  HTTP 503 ``ServiceUnavailable``, ``drop`` closes their connection without an answer,
  ``blackhole`` holds them unanswered until the fault is lifted and then drops them. None of
  them is applied while the fault lasts; SQS and Kinesis keep working.

Run it in the foreground with ``python -m local.moto_server [--host H] [--port P]``, or from
Python as a subprocess with :meth:`MotoProcess.start`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import inspect
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final

FAULTS_PATH: Final = "/_streamlease/faults"
FAULT_MODES: Final = ("up", "down", "drop", "blackhole")
READY_MARKER: Final = "moto server ready at"
EXIT_PORT_IN_USE: Final = 2
BLACKHOLE_MAX_SECONDS: Final = 60.0
"""A blackholed request is dropped after this long even if the fault is still on."""

_DYNAMODB_TARGET: Final = "DynamoDB"
_KINESIS_TARGET: Final = "Kinesis_"
_REPO_ROOT: Final = Path(__file__).resolve().parents[1]

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


# --- server side -----------------------------------------------------------------------------


class _ReleasableLock:
    """A re-entrant lock whose holder can step out of it entirely for a while (the SQS wait)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()

    def __enter__(self) -> None:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._lock.acquire()
        self._local.depth = depth + 1

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1
        if self._local.depth == 0:
            self._lock.release()

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Give the lock up completely (whatever the nesting) and take it back afterwards."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            yield
            return
        self._local.depth = 0
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._local.depth = depth


def serialise_sqs_backend() -> None:
    """Make every public ``SQSBackend`` method run under one lock, except the long-poll wait.

    moto's ``receive_message`` loops "scan visible messages, mark them received, else
    ``queue.wait_for_messages(1)``"; two unlocked scans deliver the same message twice. The
    wait itself is moved outside the lock so a long poll does not block other SQS callers.
    Idempotent.
    """
    from moto.sqs import models

    if getattr(models.SQSBackend, "_streamlease_serialised", False):
        return
    lock = _ReleasableLock()

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(*args, **kwargs)

        call.__name__ = method.__name__
        call.__doc__ = method.__doc__
        return call

    for name, member in list(vars(models.SQSBackend).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(models.SQSBackend, name, locked(member))

    original_wait = models.Queue.wait_for_messages

    def wait_for_messages(self: Any, timeout: int) -> None:
        with lock.released():
            original_wait(self, timeout)

    models.Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]
    models.SQSBackend._streamlease_serialised = True  # type: ignore[attr-defined]


class SerialisedApp:
    """WSGI middleware over moto's app: per-service locks and the DynamoDB fault switch."""

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self._dynamodb_lock = threading.Lock()
        self._kinesis_lock = threading.Lock()
        self._fault = "up"
        self._fault_changed = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == FAULTS_PATH:
            return self._faults_endpoint(environ, start_response)
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        if target.startswith(_DYNAMODB_TARGET):
            return self._dynamodb(environ, start_response)
        if target.startswith(_KINESIS_TARGET):
            with self._kinesis_lock:
                return self._complete(environ, start_response)
        return self._app(environ, start_response)

    def _dynamodb(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        with self._dynamodb_lock:
            # Checked under the lock: once a fault is switched on, no queued request applies.
            fault = self._fault
            if fault == "up":
                return self._complete(environ, start_response)
        return self._refuse(fault, environ, start_response)

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

    def set_fault(self, mode: str) -> None:
        """Switch the DynamoDB fault; returns once no request of the old mode is applying."""
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; expected one of {FAULT_MODES}")
        with self._dynamodb_lock, self._fault_changed:
            self._fault = mode
            self._fault_changed.notify_all()

    def _faults_endpoint(
        self, environ: dict[str, Any], start_response: StartResponse
    ) -> list[bytes]:
        status, payload = "200 OK", {}
        if environ.get("REQUEST_METHOD") == "POST":
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                request = json.loads(environ["wsgi.input"].read(length) or b"{}")
                if not isinstance(request, dict):
                    raise ValueError("expected a JSON object")
                if "dynamodb" in request:
                    self.set_fault(str(request["dynamodb"]))
            except ValueError as exc:
                status, payload = "400 Bad Request", {"error": str(exc)}
        if not payload:
            payload = {"dynamodb": self._fault}
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


# --- client side -----------------------------------------------------------------------------


class MotoStartError(RuntimeError):
    """The moto server process exited or stayed silent before it was ready."""


class MotoProcess:
    """A running moto server subprocess (see :meth:`start`). A context manager that stops it."""

    def __init__(self, process: subprocess.Popen[str], host: str, port: int) -> None:
        self._process = process
        self.host = host
        self.port = port
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=50)

    @classmethod
    def start(
        cls, *, host: str = "127.0.0.1", port: int = 0, timeout_seconds: float = 60.0
    ) -> MotoProcess:
        """Start ``python -m local.moto_server`` and wait until it accepts requests.

        ``port=0`` lets the server pick a free port (read it from ``.port``). The child stops
        by itself if this process dies. Raises :class:`MotoStartError` if it exits (e.g. the
        port is in use) or is not ready within ``timeout_seconds``.
        """
        process = subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
            [
                sys.executable,
                "-m",
                "local.moto_server",
                "--host",
                host,
                "--port",
                str(port),
                "--exit-with-parent",
            ],
            cwd=_REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        handle = cls(process, host, port)
        lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None and process.stderr is not None
        threading.Thread(target=_drain, args=(process.stdout, lines.put), daemon=True).start()
        threading.Thread(
            target=_drain, args=(process.stderr, handle._stderr_tail.append), daemon=True
        ).start()
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                line = ""
            if READY_MARKER in line:
                handle.port = int(line.rsplit(":", 1)[1])
                return handle
            if process.poll() is not None:
                process.wait()
                time.sleep(0.1)  # let the stderr drain catch the last words
                raise MotoStartError(
                    f"moto server exited with status {process.returncode}: {handle._last_words()}"
                )
            if time.monotonic() > deadline:
                handle.stop()
                raise MotoStartError(f"moto server not ready after {timeout_seconds} s")

    @property
    def endpoint_url(self) -> str:
        """``http://host:port``: pass it as ``endpoint_url`` to boto3."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """Process id of the server."""
        return self._process.pid

    def is_running(self) -> bool:
        """True until the server process has exited."""
        return self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited (0 after a clean stop), else None."""
        return self._process.poll()

    def set_dynamodb_down(self, down: bool = True) -> None:
        """Shorthand for :func:`set_dynamodb_down` on this server."""
        set_dynamodb_down(self.endpoint_url, down)

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout_seconds``, then SIGKILL. Safe to call twice."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def _last_words(self) -> str:
        return self._stderr_tail[-1].strip() if self._stderr_tail else "(no output)"

    def __enter__(self) -> MotoProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _drain(stream: Any, sink: Callable[[str], object]) -> None:
    for line in stream:
        sink(line)


def _control(endpoint_url: str, payload: dict[str, str] | None) -> dict[str, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(  # noqa: S310 - endpoint_url is our own local server
        endpoint_url.rstrip("/") + FAULTS_PATH,
        data=data,
        method="GET" if data is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    # A local server: never go through a proxy from the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


def set_dynamodb_fault(endpoint_url: str, mode: str) -> None:
    """Set the DynamoDB fault of our server at ``endpoint_url``: one of :data:`FAULT_MODES`.

    Returns once the mode is in force: no DynamoDB request is applied after a fault is set.
    Raises ``ValueError`` for an unknown mode, ``urllib.error.URLError`` if unreachable.
    """
    if mode not in FAULT_MODES:
        raise ValueError(f"unknown fault mode {mode!r}; expected one of {FAULT_MODES}")
    _control(endpoint_url, {"dynamodb": mode})


def set_dynamodb_down(endpoint_url: str, down: bool = True) -> None:
    """Make DynamoDB at ``endpoint_url`` answer 503 to everything (``down``) or work again."""
    set_dynamodb_fault(endpoint_url, "down" if down else "up")


def dynamodb_fault(endpoint_url: str) -> str:
    """The DynamoDB fault mode currently in force at ``endpoint_url``."""
    return str(_control(endpoint_url, None)["dynamodb"])


if __name__ == "__main__":
    sys.exit(main())
