"""A real Chromium, headless, driven through the DevTools protocol (over the ``websockets``
client the project already has): open a page, evaluate JavaScript in it, take a screenshot.

Chromium comes from the system (Debian's ``chromium`` package; ``.ci/run`` installs it on a
fresh CI machine). :func:`find_chromium` says where it is, or None.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import pytest
from websockets.sync.client import ClientConnection, connect

BINARIES: Final = ("chromium", "chromium-browser", "google-chrome")
FLAGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-port=0",
)
START_SECONDS: Final = 30.0


def find_chromium() -> str | None:
    """The path of a Chromium on ``PATH``, or None."""
    return next((found for name in BINARIES if (found := shutil.which(name))), None)


class Chromium:
    """One headless Chromium with a fresh profile in ``profile_dir``; a context manager."""

    def __init__(self, binary: str, profile_dir: Path, *, width: int = 1400, height: int = 1300):
        profile_dir.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile_dir}", f"--window-size={width},{height}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._wait_for_port(profile_dir / "DevToolsActivePort")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.loads(answer.read())
        page = next(t for t in targets if t.get("type") == "page")
        self._connection = contextlib.ExitStack()
        self._socket: ClientConnection = self._connection.enter_context(
            connect(page["webSocketDebuggerUrl"], proxy=None, max_size=None)
        )
        self._ids = itertools.count(1)

    def _wait_for_port(self, path: Path) -> int:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self._process.returncode}")
            lines = path.read_text().splitlines() if path.exists() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise RuntimeError(f"chromium did not open its DevTools port within {START_SECONDS} s")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result. Raises ``RuntimeError`` for a protocol error."""
        ident = next(self._ids)
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=30))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def open(self, url: str) -> None:
        """Navigate to ``url``."""
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the page as drawn, written to ``path``."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """Close the connection and stop the browser."""
        try:
            self._connection.close()
        finally:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


NEEDS_BROWSER: Final = "STREAMLEASE_TEST_NEEDS_BROWSER"
"""Set to 1 by ``.ci/run``, which installs Chromium: a missing browser is then a broken set-up.
Unset (or 0), the browser is optional: a developer's machine without one skips the test."""


def require_chromium() -> str:
    """Chromium's path. Where there is none: a failure when :data:`NEEDS_BROWSER` is set to
    anything but 0, else a skip that says how to get a browser."""
    found = find_chromium()
    if found is None:
        message = f"no chromium on PATH ({', '.join(BINARIES)}); Debian: apt-get install chromium"
        if os.environ.get(NEEDS_BROWSER, "0") not in ("", "0"):
            pytest.fail(f"{message} ({NEEDS_BROWSER} is set: the browser test must run)")
        pytest.skip(f"{message} ({NEEDS_BROWSER} unset: the browser is optional here)")
    return found
