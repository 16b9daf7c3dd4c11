"""Driving our moto server from another process: start it, stop it, switch its faults.

:class:`MotoProcess` runs ``python -m local.moto_server`` as a subprocess and waits until it
accepts requests; :func:`set_dynamodb_fault`, :func:`set_dynamodb_slow` and
:func:`hold_dynamodb_writes` switch the server's fault injection (:mod:`local.moto_server`).
"""

from __future__ import annotations

import collections
import json
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from local.moto_server import FAULT_MODES, FAULTS_PATH, READY_MARKER

_REPO_ROOT: Final = Path(__file__).resolve().parents[1]
_KINESIS_PUT_RECORDS: Final = "Kinesis_20131202.PutRecords"
"""The target of a Kinesis ``PutRecords`` request, as the moto server matches it."""


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


def _control(endpoint_url: str, payload: dict[str, Any] | None) -> dict[str, Any]:
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


def set_dynamodb_slow(endpoint_url: str, delay_seconds: float) -> None:
    """A brownout: every DynamoDB request waits ``delay_seconds`` before it is applied (each on
    its own, in parallel), until the fault is switched back to ``up``."""
    _control(endpoint_url, {"dynamodb": "slow", "delay_seconds": delay_seconds})


def hold_dynamodb_writes(
    endpoint_url: str, match: Sequence[str], delay_seconds: float, count: int = 1
) -> None:
    """Hold the next ``count`` DynamoDB requests whose target (``DynamoDB_20120810.UpdateItem``)
    and body contain every string of ``match``
    for ``delay_seconds``, then apply them: a write whose client gave up long ago lands late."""
    _control(
        endpoint_url,
        {"hold": {"match": list(match), "delay_seconds": delay_seconds, "count": count}},
    )


def hold_kinesis_puts(endpoint_url: str, delay_seconds: float, count: int = 1) -> None:
    """A sink slower than its callers wait: hold the next ``count`` Kinesis ``PutRecords``
    calls for ``delay_seconds`` each, then store them (a call whose client gave up still lands,
    late). Replaces any hold of DynamoDB writes; :func:`stop_holding_writes` ends it."""
    hold_dynamodb_writes(endpoint_url, [_KINESIS_PUT_RECORDS], delay_seconds, count)


def stop_holding_writes(endpoint_url: str) -> None:
    """Hold no more DynamoDB requests (those already held are still applied when due)."""
    _control(endpoint_url, {"hold": {"count": 0}})


def held_writes(endpoint_url: str) -> dict[str, int]:
    """``{"waiting": n, "applied": m}``: held requests not yet applied, and applied since."""
    state = _control(endpoint_url, None)
    return {"waiting": int(state["held_waiting"]), "applied": int(state["held_applied"])}
