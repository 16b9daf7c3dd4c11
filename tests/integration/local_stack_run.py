"""A local stack (``python -m local``, as ``make run`` runs it) for end-to-end tests: free
ports, a temporary state directory, timers scaled to a 2 s lease; driven through HTTP and the
``streamlease`` console script."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from local import polling
from local.worker_process import scaled_settings
from streamlease.settings import Settings

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).with_name("streamlease")
START_TIMEOUT = 90.0
WAIT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stack_env(state_dir: Path, workers: int = 3, **local: Any) -> dict[str, str]:
    """Settings for one stack: free ports, ``state_dir``, a 2 s lease, fast auditor/respawn."""
    base = Settings(
        local_moto_port=free_port(),
        local_api_port=free_port(),
        local_upstream_port=free_port(),
        local_state_dir=str(state_dir),
        local_workers=workers,
        local_auditor_seconds=1.0,
        local_respawn_seconds=0.5,
        **local,
    )
    settings = scaled_settings(base, lease_seconds=2.0)
    env = {**os.environ, **settings.to_env(), "PYTHONUNBUFFERED": "1"}
    env["STREAMLEASE_API_URL"] = f"http://127.0.0.1:{base.local_api_port}"
    return env


@dataclass
class StackRun:
    """``python -m local`` in its own session; its console output collected line by line."""

    env: dict[str, str]
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, env: dict[str, str]) -> StackRun:
        process = subprocess.Popen(
            [sys.executable, "-m", "local"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        run = cls(env, process)
        threading.Thread(target=run._read, daemon=True).start()
        return run

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def state_dir(self) -> Path:
        return Path(self.env["STREAMLEASE_LOCAL_STATE_DIR"])

    def wait_for_output(self, text: str, timeout: float = WAIT) -> None:
        wait_until(lambda: text in self.output, timeout, f"{text!r} in the stack's output", self)

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C, as in a terminal; returns the exit status."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def cli(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        """The ``streamlease`` console script against this stack."""
        return subprocess.run(
            [str(CLI), *args], env=self.env, input=stdin, capture_output=True, text=True, timeout=30
        )

    def cli_json(self, *args: str) -> Any:
        done = self.cli(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def wait_until(ready: Callable[[], bool], timeout: float, what: str, run: StackRun) -> None:
    """Poll ``ready``; fail the test, with the stack's output, if the stack exits first or
    ``timeout`` seconds pass."""
    try:
        polling.wait_until(
            ready, timeout, what, every_seconds=0.2, alive=lambda: run.process.poll() is None
        )
    except polling.ExitedWhileWaiting:
        pytest.fail(f"the stack exited while waiting for {what}:\n{run.output}")
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}:\n{run.output[-3000:]}")


def streams_by_id(run: StackRun) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in run.cli_json("ls")["streams"]}


def held(stream: dict[str, Any] | None) -> bool:
    return bool(stream and stream.get("owner") and stream.get("lease_state") == "held")


@contextmanager
def running_stack(state_dir: Path, **local: Any) -> Iterator[StackRun]:
    """A stack on ``state_dir``, up and printing its banner; stopped (Ctrl-C, then kill) after."""
    run = StackRun.start(stack_env(state_dir, **local))
    try:
        run.wait_for_output("streamlease is running locally", START_TIMEOUT)
        yield run
    finally:
        try:
            run.interrupt()
        finally:
            run.kill()
