"""The local stack as a user runs it (``make run`` or ``python -m local``), for the sections that
measure the stack itself: free ports, a state directory of its own, stopped with Ctrl-C.

:class:`LocalRun` starts the command in its own session, waits for the stack's description
(``stack.json``), and reads what every process of the stack holds in memory (Linux
``/proc/<pid>/status``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from local.stack_files import StackPaths, read_stack_file
from local.worker_process import DUMMY_AWS_ENV
from streamlease.settings import Settings

STOP_SECONDS: Final = 150.0
"""Longest a stack may take to drain and stop after Ctrl-C before it is killed."""


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stack_environment(state_dir: Path, **settings: Any) -> dict[str, str]:
    """The environment of a stack on free ports with ``state_dir``: this process's, without
    any ``STREAMLEASE_*`` setting of its own, plus ``settings``."""
    chosen = Settings(
        local_moto_port=free_port(),
        local_api_port=free_port(),
        local_upstream_port=free_port(),
        local_state_dir=str(state_dir),
        **settings,
    )
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEASE_")}
    inherited.pop("PYTHONPATH", None)
    return {**inherited, **DUMMY_AWS_ENV, **chosen.to_env()}


def rss_kib(pid: int) -> int | None:
    """Resident memory of process ``pid`` in KiB (None when it is gone or not on Linux)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class LocalRun:
    """A stack started by ``argv`` in ``cwd``; its console output in ``log``."""

    argv: Sequence[str]
    cwd: Path
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started_mono: float = 0.0

    @property
    def paths(self) -> StackPaths:
        """Where the stack keeps its files."""
        return StackPaths(Path(self.env["STREAMLEASE_LOCAL_STATE_DIR"]))

    @property
    def api_url(self) -> str:
        """The stack's API."""
        return f"http://127.0.0.1:{self.env['STREAMLEASE_LOCAL_API_PORT']}"

    @property
    def upstream_url(self) -> str:
        """The stack's upstream simulator (add ``/<stream id>``)."""
        return f"ws://127.0.0.1:{self.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"

    def start(self) -> None:
        """Start the command (in its own session, as a terminal would run it)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                list(self.argv),
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started_mono = time.monotonic()

    def wait_ready(self, timeout_seconds: float) -> dict[str, Any]:
        """The stack's description once it is up; ``RuntimeError`` (with the end of its
        output) if it exits first or takes longer than ``timeout_seconds``."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_seconds
        while (info := read_stack_file(self.paths)) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-8:]
                raise RuntimeError("the local stack did not start: " + " | ".join(tail))
            time.sleep(0.05)
        return info

    def memory_kib(self) -> dict[str, int]:
        """RSS of each process of the stack now: ``stack`` (the supervisor), ``moto``,
        ``api``, ``upstream`` and ``worker-<task>`` per worker."""
        info = read_stack_file(self.paths) or {}
        pids = {"stack": int(info.get("pid") or 0), **info.get("processes", {})}
        pids.update({str(w["label"]): int(w["pid"]) for w in info.get("workers", [])})
        found = {name: rss_kib(int(pid)) for name, pid in pids.items()}
        return {name: kib for name, kib in found.items() if kib is not None}

    def stop(self) -> None:
        """Ctrl-C, as a user stops it; SIGKILL to the session after :data:`STOP_SECONDS`."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@contextlib.contextmanager
def local_run(argv: Sequence[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[LocalRun]:
    """A :class:`LocalRun` that is stopped however the block ends."""
    run = LocalRun(argv, cwd, env, log)
    run.start()
    try:
        yield run
    finally:
        run.stop()
