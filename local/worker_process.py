"""One ``python -m worker`` subprocess under test control, and settings scaled for tests.

Used by the chaos tests and the benchmarks (through :mod:`local.testbed`): start a worker with
given settings, send it signals (``kill -9``, ``SIGTERM``, ``SIGSTOP``/``SIGCONT``), wait for it.
Its stdout and stderr go to a log file whose tail is shown when something fails.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from streamlease.aws import LOCAL_CREDENTIAL
from streamlease.settings import ENV_PREFIX, Settings

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
PRODUCTION_LEASE_SECONDS: Final = Settings().lease_seconds

_SCALED: Final = (
    "lease_seconds",
    "heartbeat_seconds",
    "reconcile_seconds",
    "clock_skew_seconds",
    "fence_margin_seconds",
    "rebalance_seconds",
    "min_tenure_seconds",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "stable_seconds",
    "ping_interval_seconds",
    "ping_timeout_seconds",
    "progress_seconds",
    "shutdown_budget_seconds",
    "health_max_age_seconds",
)
"""Timers that scale with the lease (every one of them is a fraction of production's)."""
MIN_FLEET_RECOUNT_SECONDS: Final = 0.25
_SCALED_WHOLE: Final = ("poll_wait_seconds", "visibility_timeout_seconds")
"""SQS takes whole seconds: scaled, rounded up, at least 1."""

DUMMY_AWS_ENV: Final[Mapping[str, str]] = {
    "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIAL,
    "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIAL,
    "AWS_SESSION_TOKEN": LOCAL_CREDENTIAL,
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
"""Credentials for moto: a process talking only to the local endpoint never needs real ones."""


def use_dummy_aws_credentials() -> None:
    """Point this process (and its children) at dummy credentials, never a developer's ~/.aws."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        os.environ.pop(name, None)
    os.environ.update(DUMMY_AWS_ENV)


def scaled_settings(base: Settings, lease_seconds: float = 2.0, **overrides: Any) -> Settings:
    """``base`` with every protocol and fleet timer scaled by ``lease_seconds`` / 20 s.

    The ratios of production (lease 20 s, heartbeat 5 s, reconcile 5 s, margin 2 s, ...) are
    kept, so a test at lease 2 s behaves like production at ten times the speed. Timers already
    changed in ``base`` are scaled from their value there. ``overrides`` win. Local upstreams
    (``ws://127.0.0.1``) are allowed.
    """
    factor = lease_seconds / PRODUCTION_LEASE_SECONDS
    values: dict[str, Any] = {name: getattr(base, name) * factor for name in _SCALED}
    for name in _SCALED_WHOLE:
        values[name] = float(max(1, math.ceil(getattr(base, name) * factor)))
    values["dynamodb_timeout_seconds"] = max(0.5, base.dynamodb_timeout_seconds * factor)
    # Dead sessions are noticed at fleet re-reads: scaled too, but a query every 0.25 s per
    # worker is as often as the serialised moto server should be asked.
    values["fleet_recount_seconds"] = max(
        MIN_FLEET_RECOUNT_SECONDS, base.fleet_recount_seconds * factor
    )
    values["connect_timeout_seconds"] = max(1.0, base.connect_timeout_seconds * factor)
    values.update(allow_insecure_ws=True, allow_loopback_upstreams=True)
    values.update(overrides)
    return dataclasses.replace(base, **values)


def reference_settings(ours: Settings) -> Settings:
    """The seed design at the same scale: reconcile every 60 s-equivalent (3 leases), release
    without a handoff command, no acquire scheduled for leases that missed heartbeats."""
    return dataclasses.replace(
        ours,
        reconcile_seconds=ours.lease_seconds * 3,
        handoff_on_release=False,
        schedule_suspects=False,
    )


def child_env(settings: Settings) -> dict[str, str]:
    """The environment of a child process: ours (AWS variables included) with ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(settings.to_env())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start_logged(
    arguments: Sequence[str], settings: Settings, log_path: Path
) -> subprocess.Popen[bytes]:
    """Start ``python <arguments>`` in the repository with ``settings`` in its environment
    (:func:`child_env`), stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(  # noqa: S603 - our own modules, fixed arguments
            [sys.executable, *arguments],
            cwd=REPO_ROOT,
            env=child_env(settings),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


class ApiProcess:
    """``python -m local.api_adapter`` on a free port, its output in a log file."""

    READY: Final = "local API ready at "

    def __init__(self, process: subprocess.Popen[bytes], url: str) -> None:
        self.process = process
        self.url = url

    @classmethod
    def start(cls, settings: Settings, log_path: Path, timeout_seconds: float = 60.0) -> ApiProcess:
        """Start it and wait for its ready line. Raises ``RuntimeError`` if it never comes."""
        process = start_logged(
            ["-m", "local.api_adapter", "--host", "127.0.0.1", "--port", "0"], settings, log_path
        )
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline and process.poll() is None:
            text = log_path.read_text(encoding="utf-8", errors="replace")
            for line in text.splitlines():
                if line.startswith(cls.READY):
                    return cls(process, line[len(cls.READY) :].strip())
            time.sleep(0.05)
        process.kill()
        process.wait()
        raise RuntimeError(f"local API did not start: see {log_path}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class WorkerProcess:
    """A worker subprocess. ``worker_id`` is fixed by the caller, so events can be matched."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        name: str,
        settings: Settings,
        log_path: Path,
    ) -> None:
        self.process = process
        self.name = name
        self.settings = settings
        self.log_path = log_path
        self.started_mono = time.monotonic()
        self.exited_mono: float | None = None
        """A monotonic time by which the process had certainly exited (set once seen dead)."""
        self.paused = False

    @classmethod
    def start(
        cls,
        settings: Settings,
        name: str,
        log_path: Path,
        *,
        command: Sequence[str] = ("-m", "worker"),
    ) -> WorkerProcess:
        """Start ``python <command>`` with ``settings`` in its environment (plus this process's
        AWS variables). ``settings.worker_id`` should be set so events can be attributed."""
        return cls(start_logged(command, settings, log_path), name, settings, log_path)

    @property
    def worker_id(self) -> str:
        """The worker id it runs under."""
        return self.settings.worker_id

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.process.pid

    @property
    def alive(self) -> bool:
        """True until the process has exited."""
        if self.process.poll() is None:
            return True
        if self.exited_mono is None:
            self.exited_mono = time.monotonic()
        return False

    def signal(self, signum: int) -> None:
        """Send ``signum`` if it still runs (SIGSTOP/SIGCONT are tracked in :attr:`paused`)."""
        if not self.alive:
            return
        self.process.send_signal(signum)
        if signum == signal.SIGSTOP:
            self.paused = True
        elif signum == signal.SIGCONT:
            self.paused = False

    def kill(self) -> None:
        """``kill -9`` and reap it."""
        self.signal(signal.SIGKILL)
        self.wait()

    def terminate(self, timeout_seconds: float | None = None) -> int | None:
        """SIGTERM (graceful drain) and wait up to ``timeout_seconds``; returns the exit status,
        or ``None`` if it is still running (``timeout_seconds=0`` does not wait)."""
        if self.paused:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        return self.wait(timeout_seconds)

    def wait(self, timeout_seconds: float | None = None) -> int | None:
        """Wait for exit; the exit status, or ``None`` if still running after the timeout."""
        try:
            code = self.process.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            return None
        if self.exited_mono is None:
            self.exited_mono = time.monotonic()
        return code

    def stop(self, grace_seconds: float) -> int:
        """SIGTERM, then SIGKILL after ``grace_seconds``. Returns the exit status."""
        code = self.terminate(grace_seconds)
        if code is None:
            self.kill()
            code = self.process.returncode
        return int(code)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of its output."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
