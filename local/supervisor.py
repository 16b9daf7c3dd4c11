"""Child processes of the local stack, and the worker supervisor that plays ECS.

:class:`Child` runs one process in its own process group (so Ctrl-C reaches only the stack,
which then stops everything in order) with its output in a log file; on Linux the kernel sends
it SIGTERM if the stack dies without cleaning up. :class:`WorkerSupervisor` keeps
``local_workers`` worker processes running: like an ECS service it notices a worker that exited,
sends the reaper a "task stopped" event for its task, and starts a replacement (a new task)
after ``local_respawn_seconds``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from streamlease.cli.render import TASK_CHARS, worker_name
from streamlease.schema import StopCode, belongs_to_task

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
CLUSTER: Final = "streamlease-local"
ACCOUNT_ID: Final = "000000000000"
STARTUP_GRACE_SECONDS: Final = 10.0
"""A worker that exits by itself sooner than this after starting failed to start."""
MAX_FAILED_STARTS: Final = 3
"""Consecutive failed starts after which the supervisor gives up."""
REAP_ATTEMPTS: Final = 5


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the child when its parent dies (else None)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    prctl = ctypes.CDLL(name, use_errno=True).prctl  # resolved here, not after fork
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    return preexec


_PREEXEC: Final = _parent_death_signal()


def child_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment passed through, plus ``overrides`` (nothing is read from it)."""
    return {**os.environ, **overrides}


def exit_description(returncode: int) -> str:
    """``killed by SIGKILL`` / ``exit status 3`` / ``exited normally``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return "exited normally" if returncode == 0 else f"exit status {returncode}"


@dataclass
class Child:
    """One child process with its output in ``log_path``; its own process group."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    started_mono: float = 0.0
    returncode: int | None = None

    def start(self) -> None:
        """Start the process (from the main thread: the parent-death signal follows the thread)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own modules, fixed arguments
                list(self.argv),
                cwd=REPO_ROOT,
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_PREEXEC,  # only a prctl call, resolved before the fork
            )
        self.started_mono = time.monotonic()
        self.returncode = None

    @property
    def pid(self) -> int:
        """The process id (0 before :meth:`start`)."""
        return self.process.pid if self.process else 0

    def poll(self) -> int | None:
        """The return code once the process has exited (its group swept), else ``None``."""
        if self.process is None or self.returncode is not None:
            return self.returncode
        state = self._leader_state()
        if state == "running":
            return None
        if state == "zombie":
            # Not reaped yet, so the group id cannot have been reused: sweep what it left there.
            self._signal_group(signal.SIGKILL)
        self.returncode = self.process.wait()
        return self.returncode

    def _leader_state(self) -> str:
        assert self.process is not None
        if not hasattr(os, "waitid"):  # macOS: no peeking, reap at once
            return "running" if self.process.poll() is None else "reaped"
        try:
            peek = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return "reaped"
        return "running" if peek is None else "zombie"

    def send(self, signum: int) -> None:
        """Send ``signum`` to the process group (nothing if it has exited)."""
        if self.poll() is None:
            self._signal_group(signum)

    def stop(self, timeout_seconds: float = 5.0) -> int | None:
        """SIGTERM the group, wait up to ``timeout_seconds``, then SIGKILL. Safe to repeat."""
        if self.process is None:
            return None
        self.send(signal.SIGTERM)
        deadline = time.monotonic() + timeout_seconds
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.poll() is None:
            self.kill()
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the group and reap the process."""
        if self.process is None:
            return
        self.send(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self.poll()

    def tail(self, lines: int = 12) -> list[str]:
        """The last ``lines`` lines of the log (empty if there is none)."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(handle.tell() - 16384, 0))
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]

    def _signal_group(self, signum: int) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)


# --- workers ---------------------------------------------------------------------------------


class WorkerStartFailed(RuntimeError):
    """Workers keep exiting right after they start; ``tail`` is the last one's log."""

    def __init__(self, name: str, returncode: int, log_path: Path, tail: list[str]) -> None:
        super().__init__(f"worker {name} could not start ({exit_description(returncode)})")
        self.name = name
        self.returncode = returncode
        self.log_path = log_path
        self.tail = tail


def task_arn_for(task_id: str, region: str) -> str:
    """A fake ECS task ARN in the local cluster."""
    return f"arn:aws:ecs:{region}:{ACCOUNT_ID}:task/{CLUSTER}/{task_id}"


def file_stem(task_id: str) -> str:
    """The name of a worker's log and lease-event files: ``worker-0f1e2d3c``."""
    return f"worker-{task_id[:TASK_CHARS]}"


@dataclass
class WorkerTask:
    """A task of the local service: one worker process (its :class:`Child`) and the ECS task
    id and ARN it runs under, which the reaper is told about when it exits."""

    label: str
    """Stem of its files (:func:`file_stem`): ``logs/<label>.log``, ``events/<label>.jsonl``."""
    task_id: str
    task_arn: str
    child: Child

    @property
    def name(self) -> str:
        """What the console and the CLI call it: ``0f1e2d3c…/4242``, the task id cut as
        :func:`worker_name` cuts it, and the pid. Its sessions' ids continue ``<task id>/<pid>``,
        so their names (``0f1e2d3c…/4242-ab12`` in ``streamlease watch``) extend this one."""
        return worker_name(f"{self.task_id}/{self.child.pid}")

    def owns(self, worker_id: str) -> bool:
        """True when ``worker_id`` is one of this process's sessions (ids continue the task id)."""
        return belongs_to_task(worker_id, self.task_id)


@dataclass
class _PendingReap:
    worker: WorkerTask
    stop_code: StopCode
    attempts: int = 0
    next_mono: float = 0.0


@dataclass
class WorkerSupervisor:
    """Keeps ``count`` worker processes running, reaping and replacing those that exit.

    ``environment(task_arn, label)`` gives a worker's full environment; ``reap(task_arn,
    stop_code)`` calls the reaper (it may raise: it is retried); ``notify(kind, text)`` receives
    one line per notable event (``kind`` is ``started``, ``died``, ``exited``, ``reaped`` or
    ``warning``).
    Call :meth:`poll` regularly from the thread that called :meth:`start` (Linux ties the
    parent-death signal to that thread).
    """

    count: int
    environment: Callable[[str, str], Mapping[str, str]]
    reap: Callable[[str, str], Mapping[str, Any] | None]
    notify: Callable[[str, str], None]
    log_dir: Path
    region: str = "us-east-1"
    respawn_seconds: float = 2.0
    argv: Sequence[str] = (sys.executable, "-m", "worker")
    exit_log: Path | None = None
    """If set, one JSON line per worker exit (task id, monotonic time seen) for reports."""
    workers: list[WorkerTask] = field(default_factory=list)
    _respawn_at: list[float] = field(default_factory=list)
    _pending_reaps: list[_PendingReap] = field(default_factory=list)
    _failed_starts: int = 0
    _stopping: bool = False

    def start(self) -> None:
        """Start ``count`` workers."""
        for _ in range(self.count):
            self._spawn()

    def find(self, worker_id: str) -> WorkerTask | None:
        """The running worker process that ``worker_id`` (one of its sessions) belongs to."""
        return next((w for w in self.workers if w.owns(worker_id)), None)

    def poll(self, now_mono: float | None = None) -> None:
        """Notice exits, call the reaper, start replacements that are due.

        Raises :class:`WorkerStartFailed` after :data:`MAX_FAILED_STARTS` consecutive workers
        exited by themselves within :data:`STARTUP_GRACE_SECONDS` of starting.
        """
        now = time.monotonic() if now_mono is None else now_mono
        for worker in list(self.workers):
            returncode = worker.child.poll()
            if returncode is None:
                if now - worker.child.started_mono >= STARTUP_GRACE_SECONDS:
                    self._failed_starts = 0
                continue
            self.workers.remove(worker)
            self._on_exit(worker, returncode, now)
        self._run_reaps(now)
        if not self._stopping:
            due = [t for t in self._respawn_at if t <= now]
            self._respawn_at = [t for t in self._respawn_at if t > now]
            for _ in due:
                self._spawn()

    def stop(self, timeout_seconds: float, hurry: Callable[[], bool] = lambda: False) -> None:
        """Stop every worker: SIGTERM (drain and hand off), then SIGKILL after the timeout or as
        soon as ``hurry()`` turns true."""
        self._stopping = True
        for worker in self.workers:
            worker.child.send(signal.SIGTERM)
        deadline = time.monotonic() + timeout_seconds
        while any(w.child.poll() is None for w in self.workers):
            if time.monotonic() > deadline or hurry():
                break
            time.sleep(0.05)
        for worker in self.workers:
            if worker.child.poll() is None:
                self.notify("warning", f"{worker.name} did not stop in time; killed")
                worker.child.kill()
        self.workers.clear()

    def _spawn(self) -> WorkerTask:
        task_id = secrets.token_hex(16)  # ECS task ids are 32 hex digits
        label = file_stem(task_id)
        task_arn = task_arn_for(task_id, self.region)
        child = Child(
            name=label,
            argv=self.argv,
            env=self.environment(task_arn, label),
            log_path=self.log_dir / f"{label}.log",
        )
        child.start()
        worker = WorkerTask(label, task_id, task_arn, child)
        self.workers.append(worker)
        self.notify("started", f"{worker.name} started (log {child.log_path})")
        return worker

    def _on_exit(self, worker: WorkerTask, returncode: int, now: float) -> None:
        how = exit_description(returncode)
        if self.exit_log is not None:
            line = {
                "task_id": worker.task_id,
                "label": worker.label,
                "name": worker.name,
                "pid": worker.child.pid,
                "returncode": returncode,
                "mono": now,
                "wall_ms": time.time_ns() // 1_000_000,
            }
            with open(self.exit_log, "a", encoding="utf-8") as log:
                log.write(json.dumps(line) + "\n")
        kind = "exited" if returncode == 0 else "died"
        self.notify(kind, f"{worker.name} {how}")
        failed_start = returncode >= 0 and now - worker.child.started_mono < STARTUP_GRACE_SECONDS
        if failed_start and not self._stopping:
            self._failed_starts += 1
            if self._failed_starts >= MAX_FAILED_STARTS:
                raise WorkerStartFailed(
                    worker.name, returncode, worker.child.log_path, worker.child.tail()
                )
        self._pending_reaps.append(_PendingReap(worker, self._stop_code(returncode), next_mono=now))
        if not self._stopping:
            self._respawn_at.append(now + self.respawn_seconds)

    @staticmethod
    def _stop_code(returncode: int) -> StopCode:
        """What ECS would say stopped the task. A worker exits 0 only after draining on a
        SIGTERM someone sent it (a roll, ``kill``): planned, as ECS's ``UserInitiated`` (the
        reaper does not count it). Any other exit is a crash: ``UnplannedTaskStops``."""
        return StopCode.USER_INITIATED if returncode == 0 else StopCode.CONTAINER_EXITED

    def _run_reaps(self, now: float) -> None:
        for pending in list(self._pending_reaps):
            if pending.next_mono > now:
                continue
            pending.attempts += 1
            name = pending.worker.name
            try:
                result = self.reap(pending.worker.task_arn, pending.stop_code) or {}
            except Exception as exc:  # the reaper is retried like an EventBridge target
                if pending.attempts >= REAP_ATTEMPTS:
                    self._pending_reaps.remove(pending)
                    self.notify("warning", f"reaper failed for {name}, giving up: {exc}")
                else:
                    pending.next_mono = now + 2.0**pending.attempts / 2
                    self.notify("warning", f"reaper failed for {name} (will retry): {exc}")
                continue
            self._pending_reaps.remove(pending)
            released = int(result.get("released") or 0)
            if released:
                handoffs = int(result.get("handoffs") or 0)
                self.notify(
                    "reaped",
                    f"reaper released {released} lease(s) of {name}, {handoffs} handoff(s)",
                )
