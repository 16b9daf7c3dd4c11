"""The local stack: moto, the API adapter, the upstream simulator and the workers, in order.

:meth:`LocalStack.start` brings each part up and checks it answers before the next one starts;
:meth:`LocalStack.run` supervises until asked to stop (workers replaced, reaper and auditor
called, the upstream simulator restarted if it exits, one console line per notable event; only
moto or the API exiting ends the stack); :meth:`LocalStack.stop` tears down in reverse order
(workers drain first, moto last) and leaves no process behind. Every child runs in its own
process group with its output in ``<state dir>/logs/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from local.events import Console, LeaseEventTailer
from local.lambda_host import LambdaHost
from local.polling import ExitedWhileWaiting, wait_until
from local.restarts import Restarting, RestartsFailing
from local.stack_files import StackPaths, StateDirBusy, StateDirLock
from local.supervisor import Child, WorkerStartFailed, WorkerSupervisor, child_environment
from local.worker_process import use_dummy_aws_credentials
from streamlease.cli.client import ApiClient
from streamlease.settings import Settings, env_name

RESOURCE_PREFIX: Final = "streamlease-local"
READY_TIMEOUT_SECONDS: Final = 60.0
TICK_SECONDS: Final = 0.2


class StackError(Exception):
    """The stack cannot start or keep running; the message says why and what to do."""


def port_in_use(host: str, port: int) -> bool:
    """True when ``host:port`` cannot be bound (another process listens there)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_ports(settings: Settings) -> None:
    """Raise :class:`StackError` naming each port that is taken and the setting that moves it."""
    taken = [
        f"port {port} ({what}) is in use on {settings.local_host}: stop what listens there "
        f"or set {env_name(field)}"
        for what, field, port in (
            ("moto", "local_moto_port", settings.local_moto_port),
            ("API", "local_api_port", settings.local_api_port),
            ("upstream simulator", "local_upstream_port", settings.local_upstream_port),
        )
        if port_in_use(settings.local_host, port)
    ]
    if taken:
        raise StackError("; ".join(taken))


def check_installed() -> None:
    """Raise :class:`StackError` when a module the stack runs cannot be imported."""
    missing = [
        name
        for name in ("moto", "flask", "flask_cors", "websockets", "aws_lambda_powertools")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise StackError(
            f"missing Python packages: {', '.join(missing)}. Run `make run`, which installs "
            "them into .venv, or `pip install -c requirements.lock -e '.[local]'`"
        )
    if importlib.util.find_spec("worker.__main__") is None:
        raise StackError("the worker (python -m worker) is not installed in this checkout")


def wait_ready(
    ready: Callable[[], bool], *, what: str, timeout_seconds: float, alive: Callable[[], bool]
) -> None:
    """Poll ``ready`` until true; raise :class:`StackError` if ``alive`` turns false or time runs
    out."""
    try:
        wait_until(ready, timeout_seconds, what, alive=alive)
    except ExitedWhileWaiting:
        raise StackError(f"{what} exited while starting") from None
    except TimeoutError:
        raise StackError(f"{what} did not become ready within {timeout_seconds:g} s") from None


def tcp_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def local_settings(settings: Settings, paths: StackPaths, moto_url: str) -> Settings:
    """The settings every local process runs with: moto, the local sink (``local_sink``: the
    file sink, or the Kinesis sink on moto), local upstreams allowed."""
    return dataclasses.replace(
        settings,
        aws_endpoint_url=moto_url,
        sink=settings.local_sink,
        sink_dir=str(paths.sink_dir),
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        api_url=f"http://{settings.local_host}:{settings.local_api_port}",
        metrics_flush_seconds=settings.local_metrics_flush_seconds,
    )


class LocalStack:
    """The whole system on this machine. Use :meth:`start`, :meth:`run`, then :meth:`stop`."""

    def __init__(self, settings: Settings, console: Console) -> None:
        self.settings = settings
        self.console = console
        self.paths = StackPaths.for_settings(settings)
        self._lock = StateDirLock(self.paths)
        self.stop_requested = threading.Event()
        self.hurry = threading.Event()
        self._children: list[Child] = []
        self._restarting: list[Restarting] = []
        self._lambdas: LambdaHost | None = None
        self._supervisor: WorkerSupervisor | None = None
        self._tailer: LeaseEventTailer | None = None
        self._last_audit: tuple[Any, ...] | None = None

    # --- start -----------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The local API's base URL."""
        return f"http://{self.settings.local_host}:{self.settings.local_api_port}"

    @property
    def upstream_url(self) -> str:
        """The upstream simulator's base URL (add ``/<stream id>``)."""
        return f"ws://{self.settings.local_host}:{self.settings.local_upstream_port}"

    @property
    def holds_state_dir(self) -> bool:
        """True once this stack has locked its state directory (until :meth:`stop`)."""
        return self._lock.held

    def claim_state_dir(self) -> None:
        """Check the settings and what is installed, then lock the state directory. Raises
        :class:`StackError` (naming the running stack's pid and ports if another holds it)."""
        if self.settings.local_workers < 1:
            raise StackError(f"{env_name('local_workers')} must be at least 1")
        check_installed()
        try:
            self._lock.acquire(self._lock_holder())
        except StateDirBusy as busy:
            raise StackError(str(busy)) from None

    def start(self) -> None:
        """Start every part in order. Raises :class:`StackError` with what went wrong.

        Nothing in the state directory is touched before this stack holds its lock
        (:meth:`claim_state_dir`, called here if it has not been): a second stack on the same
        directory refuses and leaves the running one's files alone.
        """
        s = self.settings
        if not self._lock.held:
            self.claim_state_dir()
        check_ports(s)
        if self.paths.rotate():
            self.console.line(
                "info", f"previous run's files moved to {self.paths.state_dir}/previous/"
            )
        self._start_moto()
        upstream = self._start_child(
            "upstream",
            [
                "-m",
                "local.upstream_sim",
                "--host",
                s.local_host,
                "--port",
                str(s.local_upstream_port),
            ],
        )
        wait_ready(
            lambda: tcp_open(s.local_host, s.local_upstream_port),
            what="the upstream simulator",
            timeout_seconds=READY_TIMEOUT_SECONDS,
            alive=lambda: upstream.poll() is None,
        )
        self._restarting.append(Restarting(upstream, "the upstream simulator", self.console.line))
        api = self._start_child(
            "api",
            ["-m", "local.api_adapter", "--host", s.local_host, "--port", str(s.local_api_port)],
        )
        client = ApiClient(self.api_url, timeout_seconds=2.0)
        wait_ready(
            lambda: _answers(client),
            what="the local API",
            timeout_seconds=READY_TIMEOUT_SECONDS,
            alive=lambda: api.poll() is None,
        )
        self._lambdas = LambdaHost(self.paths.logs_dir / "lambdas.log")
        self._lambdas.load()
        self._start_workers(client)
        self._audit()  # also warms the Lambda clients, so the first reaper call is prompt
        self.paths.write_stack_file(self.describe())

    def _lock_holder(self) -> dict[str, Any]:
        s = self.settings
        return {
            "pid": os.getpid(),
            "ports": {
                "API": f"{s.local_host}:{s.local_api_port}",
                "moto": f"{s.local_host}:{s.local_moto_port}",
                "upstream": f"{s.local_host}:{s.local_upstream_port}",
            },
        }

    def _start_moto(self) -> None:
        # Our serialised launcher, run as a child in its own process group: a Ctrl-C in the
        # terminal must not stop moto before the workers have released their leases into it.
        from local.moto_process import dynamodb_fault
        from local.resources import create_resources

        # Dummy credentials, no ~/.aws: requests go to moto, a developer's keys never leave.
        use_dummy_aws_credentials()
        os.environ["AWS_DEFAULT_REGION"] = os.environ["AWS_REGION"] = self.settings.aws_region
        host, port = self.settings.local_host, self.settings.local_moto_port
        moto = self._start_child(
            "moto", ["-m", "local.moto_server", "--host", host, "--port", str(port)]
        )
        endpoint = f"http://{host}:{port}"

        def ready() -> bool:
            try:
                return dynamodb_fault(endpoint) == "up"
            except OSError:
                return False

        wait_ready(
            ready,
            what="the moto server",
            timeout_seconds=READY_TIMEOUT_SECONDS,
            alive=lambda: moto.poll() is None,
        )
        base = local_settings(self.settings, self.paths, endpoint)
        self.settings = create_resources(base, prefix=RESOURCE_PREFIX)
        # Children inherit the final settings; the Lambda modules read them when imported.
        os.environ.update(self.settings.to_env())

    def _start_child(self, name: str, args: list[str]) -> Child:
        child = Child(
            name=name,
            argv=[sys.executable, *args],
            env=child_environment({"PYTHONUNBUFFERED": "1"}),
            log_path=self.paths.logs_dir / f"{name}.log",
        )
        child.start()
        self._children.append(child)
        return child

    def _worker_environment(self, task_arn: str, label: str) -> dict[str, str]:
        env = self.settings.to_env(
            task_arn=task_arn,
            worker_id="",
            lease_event_log=str(self.paths.events_dir / f"{label}.jsonl"),
            health_file=str(self.paths.run_dir / f"{label}.health"),
        )
        return child_environment({**env, "PYTHONUNBUFFERED": "1"})

    def _start_workers(self, client: ApiClient) -> None:
        assert self._lambdas is not None
        supervisor = WorkerSupervisor(
            count=self.settings.local_workers,
            environment=self._worker_environment,
            reap=self._lambdas.reap,
            notify=self.console.line,
            log_dir=self.paths.logs_dir,
            region=self.settings.aws_region,
            respawn_seconds=self.settings.local_respawn_seconds,
            exit_log=self.paths.exits_file,
        )
        self._supervisor = supervisor
        self._tailer = LeaseEventTailer(self.paths.events_dir, self.console.line)
        supervisor.start()

        def registered() -> bool:
            try:
                ids = [str(w.get("id")) for w in client.list_workers()]
            except Exception:
                return False
            return all(any(w.owns(i) for i in ids) for w in supervisor.workers)

        def alive() -> bool:
            for worker in supervisor.workers:
                if worker.child.poll() is not None:
                    tail = "\n    ".join(worker.child.tail())
                    raise StackError(
                        f"worker {worker.name} could not start "
                        f"({worker.child.returncode}); last lines of "
                        f"{worker.child.log_path}:\n    {tail}"
                    )
            return True

        wait_ready(
            registered, what="the workers", timeout_seconds=READY_TIMEOUT_SECONDS, alive=alive
        )

    def describe(self) -> dict[str, Any]:
        """Where everything is (written to ``stack.json`` for ``make demo`` and scripts)."""
        return {
            "pid": os.getpid(),
            "api_url": self.api_url,
            "upstream_url": self.upstream_url,
            "moto_url": self.settings.aws_endpoint_url,
            "aws_region": self.settings.aws_region,
            "table_name": self.settings.table_name,
            "queue_url": self.settings.queue_url,
            "sink": self.settings.sink,
            "kinesis_stream_name": self.settings.kinesis_stream_name,
            "state_dir": str(self.paths.state_dir),
            "sink_dir": str(self.paths.sink_dir),
            "events_dir": str(self.paths.events_dir),
            "exits_file": str(self.paths.exits_file),
            "logs_dir": str(self.paths.logs_dir),
            "processes": {child.name: child.pid for child in self._children},
            "workers": [
                {"name": w.name, "label": w.label, "pid": w.child.pid, "task_arn": w.task_arn}
                for w in (self._supervisor.workers if self._supervisor else [])
            ],
        }

    # --- run -------------------------------------------------------------------------------

    def run(self) -> None:
        """Supervise until :attr:`stop_requested` is set. Raises :class:`StackError` when a part
        dies or workers cannot start."""
        assert self._supervisor is not None and self._tailer is not None
        next_audit = time.monotonic() + self.settings.local_auditor_seconds
        workers_seen = [w.child.pid for w in self._supervisor.workers]
        while not self.stop_requested.wait(TICK_SECONDS):
            try:
                self._supervisor.poll()
            except WorkerStartFailed as exc:
                tail = "\n    ".join(exc.tail)
                raise StackError(f"{exc}; last lines of {exc.log_path}:\n    {tail}") from exc
            self._tailer.pump()
            if self._check_parts():
                self.paths.write_stack_file(self.describe())
            if time.monotonic() >= next_audit:
                next_audit = time.monotonic() + self.settings.local_auditor_seconds
                self._audit()
            pids = [w.child.pid for w in self._supervisor.workers]
            if pids != workers_seen:
                workers_seen = pids
                self.paths.write_stack_file(self.describe())

    def _check_parts(self) -> bool:
        """Restart the parts that may die alone; True when one was. Raises
        :class:`StackError` when any other part (moto, the API) has exited."""
        restarted = False
        for part in self._restarting:
            try:
                restarted = part.poll() or restarted
            except RestartsFailing as exc:
                tail = "\n    ".join(exc.tail)
                raise StackError(f"{exc}; last lines of {exc.log_path}:\n    {tail}") from exc
        restartable = {id(part.child) for part in self._restarting}
        for child in self._children:
            if id(child) not in restartable and child.poll() is not None:
                tail = "\n    ".join(child.tail())
                raise StackError(
                    f"the {child.name} process exited; last lines of {child.log_path}:\n    {tail}"
                )
        return restarted

    def _audit(self) -> None:
        assert self._lambdas is not None
        try:
            numbers = self._lambdas.audit()
        except Exception as exc:  # a failed audit is worth a line, not the stack
            self.console.line("warning", f"auditor failed: {exc}")
            return
        key = tuple(
            numbers.get(k)
            for k in ("started_streams", "owned_streams", "orphaned_streams", "live_workers")
        )
        if key != self._last_audit or numbers.get("orphaned_streams"):
            self._last_audit = key
            self.console.line(
                "audit",
                f"{numbers.get('started_streams')} wanted, {numbers.get('owned_streams')} owned, "
                f"{numbers.get('orphaned_streams')} orphaned "
                f"(oldest {numbers.get('oldest_orphan_age_seconds')}s), "
                f"{numbers.get('live_workers')} live workers",
            )

    # --- stop ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything that was started, workers first and moto last, then unlock the
        state directory. Safe to repeat; does nothing when the stack never held the lock."""
        if not self._lock.held:
            return
        if self._supervisor is not None:
            budget = 2.0 if self.hurry.is_set() else self.settings.shutdown_budget_seconds + 5
            self._supervisor.stop(budget, hurry=self.hurry.is_set)
            if self._tailer is not None:
                self._tailer.pump()
            self._supervisor = None
        self._restarting.clear()
        for child in reversed(self._children):
            child.stop(1.0 if self.hurry.is_set() else 5.0)
        self._children.clear()
        if self._lambdas is not None:
            self._lambdas.close()
            self._lambdas = None
        with contextlib.suppress(FileNotFoundError):
            self.paths.stack_file.unlink()
        self._lock.release()


def _answers(client: ApiClient) -> bool:
    try:
        client.list_workers()
    except Exception:
        return False
    return True
