"""The local supervisor: child processes in their own groups, and workers reaped and replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lambdas.reaper import is_planned_stop
from local.restarts import RESTARTED, Restarting, RestartsFailing
from local.supervisor import (
    MAX_FAILED_STARTS,
    Child,
    WorkerStartFailed,
    WorkerSupervisor,
    child_environment,
)
from streamlease.cli.render import worker_name

pytestmark = pytest.mark.slow

SLEEPER = (sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)")
DRAINER = (
    sys.executable,
    "-c",
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
    "print('up', flush=True); time.sleep(60)",
)
"""Exits 0 on SIGTERM, as a worker does once it has drained."""
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def dead(pid: int) -> bool:
    """Gone or a zombie (an orphan's zombie is reaped by init, eventually)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.reaps: list[tuple[str, str]] = []
        self.envs: list[tuple[str, str]] = []
        self.reap_failures = 0

    def notify(self, kind: str, text: str) -> None:
        self.lines.append((kind, text))

    def reap(self, task_arn: str, stop_code: str) -> dict[str, Any]:
        if self.reap_failures:
            self.reap_failures -= 1
            raise RuntimeError("table unreachable")
        self.reaps.append((task_arn, stop_code))
        return {"released": 2, "handoffs": 2}

    def environment(self, task_arn: str, label: str) -> dict[str, str]:
        self.envs.append((task_arn, label))
        return child_environment({"TASK_ARN": task_arn})

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.lines]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_supervisor(
    recorder: Recorder, tmp_path: Path
) -> Iterator[Callable[..., WorkerSupervisor]]:
    made: list[WorkerSupervisor] = []

    def make(argv: tuple[str, ...] = SLEEPER, **kwargs: Any) -> WorkerSupervisor:
        supervisor = WorkerSupervisor(
            count=kwargs.pop("count", 1),
            environment=recorder.environment,
            reap=recorder.reap,
            notify=recorder.notify,
            log_dir=tmp_path,
            respawn_seconds=kwargs.pop("respawn_seconds", 0.1),
            argv=argv,
            **kwargs,
        )
        made.append(supervisor)
        return supervisor

    yield make
    for supervisor in made:
        supervisor.stop(2.0)


def test_a_dead_worker_is_reaped_and_replaced(
    make_supervisor: Callable[..., WorkerSupervisor], recorder: Recorder, tmp_path: Path
) -> None:
    """kill -9 of a worker: a "died" line, the reaper called with its task ARN, then a new task."""
    supervisor = make_supervisor(exit_log=tmp_path / "exits.jsonl")
    supervisor.start()
    first = supervisor.workers[0]
    assert first.task_arn.startswith("arn:aws:ecs:us-east-1:000000000000:task/streamlease-local/")
    assert recorder.envs == [(first.task_arn, first.label)]
    os.kill(first.child.pid, signal.SIGKILL)

    def replaced() -> bool:
        supervisor.poll()
        return bool(supervisor.workers) and supervisor.workers[0].task_id != first.task_id

    eventually(replaced)
    assert recorder.reaps == [(first.task_arn, "EssentialContainerExited")]
    assert ("died", f"{first.name} killed by SIGKILL") in recorder.lines
    assert "reaped" in recorder.kinds()
    assert supervisor.workers[0].task_arn != first.task_arn
    exits = [json.loads(line) for line in (tmp_path / "exits.jsonl").read_text().splitlines()]
    assert [(e["task_id"], e["name"], e["returncode"]) for e in exits] == [
        (first.task_id, first.name, -signal.SIGKILL)
    ]


def test_a_drained_worker_is_a_planned_stop_and_a_killed_one_is_not(
    make_supervisor: Callable[..., WorkerSupervisor], recorder: Recorder
) -> None:
    """A worker rolled with SIGTERM (it drains and exits 0) reaches the reaper as ECS's
    "UserInitiated", which it does not count in UnplannedTaskStops; kill -9 stays a crash."""
    supervisor = make_supervisor(argv=DRAINER, count=2)
    supervisor.start()
    rolled, killed = supervisor.workers
    eventually(lambda: "up" in rolled.child.log_path.read_text())
    os.kill(rolled.child.pid, signal.SIGTERM)
    os.kill(killed.child.pid, signal.SIGKILL)

    def both_reaped() -> bool:
        supervisor.poll()
        return len(recorder.reaps) == 2

    eventually(both_reaped)
    codes = dict(recorder.reaps)
    assert codes == {rolled.task_arn: "UserInitiated", killed.task_arn: "EssentialContainerExited"}
    assert is_planned_stop(codes[rolled.task_arn], "")
    assert not is_planned_stop(codes[killed.task_arn], "")


def test_a_worker_is_named_as_the_cli_names_its_sessions(
    make_supervisor: Callable[..., WorkerSupervisor], recorder: Recorder
) -> None:
    """The console's name for a worker process is the start of what ``streamlease watch`` shows
    for each of its sessions: one name, not a local label next to the id."""
    supervisor = make_supervisor()
    supervisor.start()
    worker = supervisor.workers[0]
    session_id = f"{worker.task_id}/{worker.child.pid}-ab12"
    assert worker.name == f"{worker.task_id[:8]}…/{worker.child.pid}"
    assert worker_name(session_id) == f"{worker.name}-ab12"
    assert recorder.lines[0] == ("started", f"{worker.name} started (log {worker.child.log_path})")
    assert worker.child.log_path.name == f"worker-{worker.task_id[:8]}.log"
    assert supervisor.find(session_id) is worker
    assert supervisor.find("someone-else/1-ffff") is None


def test_workers_that_cannot_start_stop_the_supervisor(
    make_supervisor: Callable[..., WorkerSupervisor], recorder: Recorder
) -> None:
    """Workers exiting by themselves right after starting: after three, WorkerStartFailed with
    the log's last lines."""
    failing = (sys.executable, "-c", "print('no table named x'); raise SystemExit(3)")
    supervisor = make_supervisor(failing, respawn_seconds=0.0)
    supervisor.start()
    with pytest.raises(WorkerStartFailed) as failed:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            supervisor.poll()
            time.sleep(0.05)
    assert failed.value.returncode == 3
    died = [text for kind, text in recorder.lines if kind == "died"]
    assert len(died) == 3 and died[-1].startswith(f"{failed.value.name} exit status 3")
    assert "no table named x" in "\n".join(failed.value.tail)
    assert "exit status 3" in str(failed.value)


def test_reaper_failures_are_retried(
    make_supervisor: Callable[..., WorkerSupervisor], recorder: Recorder
) -> None:
    """A reaper call that raises is retried, like an EventBridge target, until it succeeds."""
    recorder.reap_failures = 1
    supervisor = make_supervisor()
    supervisor.start()
    os.kill(supervisor.workers[0].child.pid, signal.SIGKILL)
    eventually(lambda: (supervisor.poll(), len(recorder.reaps) == 1)[1])
    assert "warning" in recorder.kinds()


def test_stop_escalates_to_sigkill(
    make_supervisor: Callable[..., WorkerSupervisor], recorder: Recorder, tmp_path: Path
) -> None:
    """A worker that ignores SIGTERM is killed when the stop budget runs out."""
    stubborn = (
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
    )
    supervisor = make_supervisor(stubborn)
    supervisor.start()
    child = supervisor.workers[0].child
    eventually(lambda: "ready" in child.log_path.read_text())
    supervisor.stop(0.5)
    assert child.returncode == -signal.SIGKILL
    assert any("did not stop in time" in text for _, text in recorder.lines)
    assert supervisor.workers == []


@linux_only
def test_child_exit_sweeps_its_process_group(tmp_path: Path) -> None:
    """What a child leaves running in its process group is killed once the child has exited."""
    script = (
        "import subprocess, sys; p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True)"
    )
    child = Child("c", [sys.executable, "-c", script], child_environment({}), tmp_path / "c.log")
    child.start()
    eventually(lambda: child.poll() is not None)
    grandchild = int((tmp_path / "c.log").read_text().split()[0])
    eventually(lambda: dead(grandchild))


@linux_only
def test_children_die_with_the_stack(tmp_path: Path) -> None:
    """If the stack itself is killed with SIGKILL, Linux stops its children (parent death)."""
    script = (
        "import sys, time; from pathlib import Path; from local.supervisor import Child, "
        "child_environment; "
        f"c = Child('s', ['sleep', '60'], child_environment({{}}), Path({str(tmp_path)!r}) / "
        "'s.log'); c.start(); print(c.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    eventually(lambda: dead(pid))


def test_a_part_that_exits_is_restarted_and_said_so(tmp_path: Path) -> None:
    """The upstream simulator's policy: killed, it is started again with one console line."""
    child = Child("upstream", SLEEPER, child_environment({}), tmp_path / "upstream.log")
    child.start()
    lines: list[tuple[str, str]] = []
    part = Restarting(
        child, "the upstream simulator", lambda kind, text: lines.append((kind, text))
    )
    first = child.pid
    try:
        assert part.poll() is False
        os.kill(first, signal.SIGKILL)
        eventually(lambda: part.poll())
        assert child.pid != first and child.poll() is None
        assert lines == [
            (
                RESTARTED,
                f"the upstream simulator (pid {first}) killed by SIGKILL; started again as pid "
                f"{child.pid}: streams reconnect to it (log {child.log_path})",
            )
        ]
    finally:
        child.kill()


def test_a_part_that_keeps_exiting_as_it_starts_ends_the_stack(tmp_path: Path) -> None:
    """Restarting what exits at once (its port taken) would only hide why: it is given up."""
    failing = (sys.executable, "-c", "raise SystemExit(3)")
    child = Child("upstream", failing, child_environment({}), tmp_path / "upstream.log")
    child.start()
    part = Restarting(child, "the upstream simulator", lambda kind, text: None)

    def gives_up() -> bool:
        try:
            part.poll()
        except RestartsFailing:
            return True
        return False

    eventually(gives_up)
    assert part.restarts == MAX_FAILED_STARTS - 1
