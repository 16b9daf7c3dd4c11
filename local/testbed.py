"""A whole scaled-down system under test control: the chaos tests' and benchmarks' stage.

One :class:`Testbed` holds, for one run: fresh resources on a (serialised) moto server, an
upstream simulator, the real API handler served over HTTP in this process, the reaper handler,
and any number of ``python -m worker`` subprocesses that write lease events and sink records to
the run directory. It watches ownership from the workers' lease events (no DynamoDB polling, so
watching costs the store nothing) and hands the evidence to :mod:`local.invariants`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote

from local.invariants import Report, SinkRecord, Window, check, current_owners, load_records
from local.jsonl_tail import JsonlTail
from local.upstream_sim import UpstreamSimulator, payload_for, run_in_thread
from local.worker_process import ApiProcess, WorkerProcess
from streamlease.cli.client import ApiClient
from streamlease.lease_events import LeaseEvent
from streamlease.schema import belongs_to_task
from streamlease.settings import Settings

ACCOUNT: Final = "000000000000"
CREATE_CALLS_AT_ONCE: Final = 8
"""API calls :meth:`Testbed.create_streams` has under way at once."""


class EventTail:
    """The lease events appended to a set of event logs, read incrementally and kept in
    :attr:`events` (in the order read)."""

    def __init__(self) -> None:
        self._tail = JsonlTail(LeaseEvent.from_dict)
        self.events: list[LeaseEvent] = []

    @property
    def malformed(self) -> int:
        """Complete lines read so far that were not lease events."""
        return self._tail.malformed

    def add(self, path: Path) -> None:
        """Follow ``path`` too (it may not exist yet)."""
        self._tail.follow(path)

    def refresh(self) -> list[LeaseEvent]:
        """Read what was appended since the last call (complete lines only); returns it."""
        new = self._tail.read_new()
        self.events.extend(new)
        return new


class Testbed:
    """Upstream simulator + API + reaper + worker processes around one set of resources.

    ``settings`` name the resources (see :func:`local.resources.create_resources`) and carry the
    scaled timers every worker gets. Use as a context manager: on exit every worker is stopped
    (SIGTERM, then SIGKILL) and the servers are shut down.
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self, settings: Settings, run_dir: Path, *, rate: float = 5.0, sink: str = "file"
    ) -> None:
        """``sink``: ``file`` (a JSONL file per stream under ``run_dir``) or ``kinesis`` (the
        stream ``settings`` name; :meth:`report` then judges what the consumer reads of it)."""
        self.run_dir = run_dir
        self.sink_dir = run_dir / "sink"
        self.rate = rate
        self.settings = dataclasses.replace(settings, sink=sink, sink_dir=str(self.sink_dir))
        self.workers: list[WorkerProcess] = []
        self.tail = EventTail()
        self.wanted: dict[str, list[Window]] = {}
        self.stream_ids: list[str] = []
        self._cleanups: list[Callable[[], None]] = []
        self.upstream: UpstreamSimulator
        self.api: ApiClient

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        for directory in (self.run_dir, self.sink_dir, self.run_dir / "health"):
            directory.mkdir(parents=True, exist_ok=True)
        sim_context = run_in_thread(default_rate=self.rate)
        self.upstream = sim_context.__enter__()

        def stop_upstream() -> None:
            sim_context.__exit__(None, None, None)

        self._cleanups.append(stop_upstream)
        self._start_api()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all_workers()
        for cleanup in reversed(self._cleanups):
            cleanup()

    def _start_api(self) -> None:
        # A process of its own, like API Gateway + Lambda: its logs go to a file, not to ours.
        # Production's DynamoDB timeout: the API is not what the scaled timers are about.
        api_settings = dataclasses.replace(
            self.settings, dynamodb_timeout_seconds=Settings().dynamodb_timeout_seconds
        )
        api = ApiProcess.start(api_settings, self.run_dir / "logs" / "api.log")
        self._cleanups.append(api.stop)
        self.api = ApiClient(api.url)

    # --- workers ---------------------------------------------------------------------------

    def add_worker(
        self, name: str | None = None, *, command: Sequence[str] = (), **overrides: Any
    ) -> WorkerProcess:
        """Start one worker (settings overridden by ``overrides``); returns it at once.

        ``command``: Python arguments that run the worker some other way (default
        ``-m worker``), e.g. under the bench's request counter.
        """
        name = name or f"w{len(self.workers) + 1}"
        worker_id = f"{name}-{uuid.uuid4().hex[:8]}"
        events = self.run_dir / "events" / f"{worker_id}.jsonl"
        settings = dataclasses.replace(
            self.settings,
            worker_id=worker_id,
            task_arn=f"arn:aws:ecs:{self.settings.aws_region}:{ACCOUNT}:task/local/{worker_id}",
            lease_event_log=str(events),
            health_file=str(self.run_dir / "health" / worker_id),
            **overrides,
        )
        self.tail.add(events)
        log = self.run_dir / "logs" / f"{worker_id}.log"
        if command:
            worker = WorkerProcess.start(settings, name, log, command=command)
        else:
            worker = WorkerProcess.start(settings, name, log)
        self.workers.append(worker)
        return worker

    def wait_workers_live(self, count: int, timeout_seconds: float) -> float:
        """Wait until the fleet (``GET /workers``) lists at least ``count`` live workers."""
        return self.wait_for(
            lambda: len(self.api.list_workers()) >= count,
            timeout_seconds,
            f"{count} workers live",
            every=0.25,
        )

    def wait_worker_running(self, worker: WorkerProcess, timeout_seconds: float) -> float:
        """Wait until ``worker`` runs its services (:meth:`worker_running`) or has exited.
        Returns the seconds waited."""
        return self.wait_for(
            lambda: self.worker_running(worker) or not worker.alive,
            timeout_seconds,
            f"{worker.worker_id} running",
        )

    @staticmethod
    def worker_running(worker: WorkerProcess) -> bool:
        """True once ``worker`` runs its services: its health file exists (it is written when
        they start, next to its first reconcile)."""
        return Path(worker.settings.health_file).exists()

    def live_workers(self) -> list[WorkerProcess]:
        """Workers whose process still runs (paused ones included)."""
        return [w for w in self.workers if w.alive]

    def stop_all_workers(self) -> None:
        """SIGTERM every live worker at once, then wait (SIGKILL after the shutdown budget)."""
        live = self.live_workers()
        for worker in live:
            worker.terminate(0)
        for worker in live:
            worker.stop(self.settings.shutdown_budget_seconds + 5)

    def reap(self, worker: WorkerProcess) -> dict[str, Any]:
        """Run the reaper handler for ``worker``'s task, as ECS would after the task stopped."""
        return self.reap_task(worker.settings.task_arn)

    def reap_task(self, task_arn: str) -> dict[str, Any]:
        """Run the reaper handler for a stopped ECS task.

        In this process (a Lambda cold start is not what is measured: call it once with an
        unknown task to warm it up); its log lines and metrics go to ``logs/reaper.log``.
        """
        from lambdas import reaper, runtime
        from local.lambda_context import LambdaContext

        if runtime.current().settings != self.settings:
            runtime.configure(self.settings)
        reaper.logger.setLevel("WARNING")
        log = self.run_dir / "logs" / "reaper.log"
        with open(log, "a", encoding="utf-8") as out, contextlib.redirect_stdout(out):
            result: dict[str, Any] = reaper.handler(
                reaper.stopped_task_event(task_arn), LambdaContext()
            )
        return result

    # --- streams ---------------------------------------------------------------------------

    def url_for(self, stream_id: str, **query: Any) -> str:
        """The upstream URL of ``stream_id`` on this run's simulator."""
        return self.upstream.url_for(stream_id, **({"rate": self.rate} | query))

    def create_streams(self, count: int, prefix: str = "s", **query: Any) -> list[str]:
        """Create and start ``count`` streams through the API, a few calls at a time (one
        after the other, each would wait its turn at the serialised moto server behind the
        workers' calls); returns their ids."""
        ids = [f"{prefix}{i:03d}-{uuid.uuid4().hex[:4]}" for i in range(count)]
        with ThreadPoolExecutor(CREATE_CALLS_AT_ONCE) as calls:
            for _ in calls.map(lambda stream_id: self.start_new_stream(stream_id, **query), ids):
                pass  # each call's error is raised here
        return ids

    def start_new_stream(self, stream_id: str, **query: Any) -> float:
        """``POST /streams`` for one new stream; returns the monotonic time of the call."""
        at = time.monotonic()
        self.api.create_stream(stream_id, self.url_for(stream_id, **query))
        self.stream_ids.append(stream_id)
        self.wanted.setdefault(stream_id, []).append((at, None))
        return at

    def stop_stream(self, stream_id: str) -> float:
        """``POST /streams/{id}/stop``; closes its wanted window. Returns the call's time."""
        at = time.monotonic()
        self.api.stop_stream(stream_id)
        windows = self.wanted[stream_id]
        windows[-1] = (windows[-1][0], at)
        return at

    def start_stream(self, stream_id: str) -> float:
        """``POST /streams/{id}/start`` again; opens a wanted window. Returns the call's time."""
        at = time.monotonic()
        self.api.start_stream(stream_id)
        self.wanted[stream_id].append((at, None))
        return at

    # --- observation -----------------------------------------------------------------------

    def owners(self, at: float | None = None) -> dict[str, str]:
        """Stream → worker id of every holder that may deliver at ``at`` (default: now).

        A worker seen dead holds nothing, whatever its last deadline said: a killed worker whose
        leases the reaper freed must not look like the holder once their new holder lets go.
        """
        self.tail.refresh()
        return current_owners(
            self.tail.events,
            time.monotonic() if at is None else at,
            worker_exits=self.worker_exits(),
        )

    def worker_exits(self) -> dict[str, float]:
        """Worker id → a monotonic time by which its process had exited (dead workers only).

        Every session of a process counts: one that lost its session went on under a new id
        that continues its first one."""
        sessions = {e.worker_id for e in self.tail.events}
        return {
            session: worker.exited_mono
            for worker in self.workers
            if not worker.alive and worker.exited_mono is not None
            for session in sessions | {worker.worker_id}
            if belongs_to_task(session, worker.worker_id)
        }

    def wait_for(
        self, condition: Callable[[], bool], timeout_seconds: float, what: str, every: float = 0.1
    ) -> float:
        """Poll ``condition`` until true; seconds waited. Raises ``TimeoutError`` naming ``what``
        with the tails of the workers' logs."""
        start = time.monotonic()
        while not condition():
            if time.monotonic() - start > timeout_seconds:
                raise TimeoutError(
                    f"{what}: not within {timeout_seconds:.0f} s\n{self.diagnosis()}"
                )
            time.sleep(every)
        return time.monotonic() - start

    def wait_all_owned(self, stream_ids: Iterable[str], timeout_seconds: float) -> float:
        """Wait until each of ``stream_ids`` has a live holder; returns the seconds waited."""
        wanted = set(stream_ids)

        def all_owned() -> bool:
            return wanted <= set(self.owners())

        return self.wait_for(all_owned, timeout_seconds, f"all {len(wanted)} streams owned")

    def wait_taken_over(
        self, stream_ids: Iterable[str], from_worker: str, timeout_seconds: float
    ) -> float:
        """Wait until each of ``stream_ids`` has a live holder other than ``from_worker`` (a
        frozen worker stays the holder on paper until its deadline; a dead one holds nothing)."""
        ids = set(stream_ids)

        def moved() -> bool:
            owners = self.owners()
            return all(owners.get(s) not in (None, from_worker) for s in ids)

        return self.wait_for(moved, timeout_seconds, f"{len(ids)} streams taken over")

    def holdings(self) -> dict[str, set[str]]:
        """Worker id → the streams it holds now (live workers only, empty sets included)."""
        out: dict[str, set[str]] = {w.worker_id: set() for w in self.live_workers()}
        for stream_id, worker_id in self.owners().items():
            out.setdefault(worker_id, set()).add(stream_id)
        return out

    def wait_none_owned(self, stream_ids: Iterable[str], timeout_seconds: float) -> float:
        """Wait until none of ``stream_ids`` has a live holder."""
        ids = set(stream_ids)
        return self.wait_for(
            lambda: not ids & set(self.owners()), timeout_seconds, f"{len(ids)} streams released"
        )

    def sink_file(self, stream_id: str) -> Path:
        """Where the file sink appends ``stream_id``'s records."""
        return self.sink_dir / (quote(stream_id, safe="") + ".jsonl")

    def first_record_after(self, stream_id: str, size_before: int = 0) -> bool:
        """True once the sink file of ``stream_id`` has grown past ``size_before`` bytes."""
        try:
            return self.sink_file(stream_id).stat().st_size > size_before
        except FileNotFoundError:
            return False

    def report(self, records: Iterable[SinkRecord] | None = None, **kwargs: Any) -> Report:
        """Check the invariants on everything recorded so far (see :func:`local.invariants.check`).

        ``records``: what to judge (default: the file sink's records). Defaults: the wanted
        windows of the API calls made here, the times workers were seen dead, seqs start at 1,
        payloads must be the simulator's.
        """
        self.tail.refresh()
        malformed = 0
        if records is None:
            records, malformed = load_records(self.sink_dir)
        options: dict[str, Any] = {
            "wanted": self.wanted,
            "worker_exits": self.worker_exits(),
            "expected_first_seq": 1,
            "verify_payload": _simulator_payload,
            "malformed_lines": malformed + self.tail.malformed,
        }
        options.update(kwargs)
        return check(self.tail.events, records, **options)

    def diagnosis(self, lines: int = 15) -> str:
        """The tail of every worker's log (what a failing test prints)."""
        parts = []
        for w in self.workers:
            state = "running" if w.alive else f"exited {w.process.returncode}"
            parts.append(f"--- {w.worker_id} ({state}) ---\n{w.log_tail(lines)}")
        return "\n".join(parts)


def _simulator_payload(record: Any) -> bool:
    """The sink keeps the upstream frame: its seq and data must be the simulator's for that seq."""
    payload = record.payload
    return (
        isinstance(payload, dict)
        and payload.get("seq") == record.seq
        and payload.get("data") == payload_for(record.stream_id, record.seq)
    )


def settings_for_run(base: Settings, **overrides: Any) -> Settings:
    """``base`` with ``overrides`` (a convenience for sections that vary one field)."""
    return dataclasses.replace(base, **overrides)


__all__: Sequence[str] = ["EventTail", "Testbed", "settings_for_run"]
