"""End to end: ``python -m local`` as ``make run`` runs it, driven only through HTTP and the CLI.

The stack runs on free ports with a temporary state directory and timers scaled to a 2 s lease;
the workers write to the file sink, whose records show whether every stream kept flowing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_stack_run import (
    REPO,
    START_TIMEOUT,
    WAIT,
    StackRun,
    free_port,
    held,
    running_stack,
    stack_env,
    streams_by_id,
    wait_until,
)

from local.sink_report import build_report
from local.stack import port_in_use
from local.stack_files import StackPaths, read_stack_file
from streamlease.cli.render import worker_name
from streamlease.telemetry import ReaperMetric

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with running_stack(tmp_path_factory.mktemp("stack")) as run:
        yield run


def test_stack_prints_urls_and_next_commands(stack: StackRun) -> None:
    """The banner names the API URL and the commands a newcomer types next."""
    api = stack.env["STREAMLEASE_API_URL"]
    assert f"API        {api}" in stack.output
    assert "streamlease start demo-1 'ws://127.0.0.1:" in stack.output  # `?` quoted for zsh
    assert "streamlease watch" in stack.output
    assert "make demo" in stack.output


def test_streams_keep_flowing_when_a_worker_is_killed(stack: StackRun) -> None:
    """kill -9 of a worker: the supervisor reaps it, others take its streams over, a
    replacement starts, and the sink shows every stream delivered without a gap."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    ids = [f"flow-{n}" for n in range(1, 5)]
    for stream_id in ids:
        done = stack.cli("start", stream_id, f"{upstream}/{stream_id}?rate=20")
        assert done.returncode == 0, done.stderr
    wait_until(
        lambda: all(held(streams_by_id(stack).get(i)) for i in ids), WAIT, "all owned", stack
    )

    before = streams_by_id(stack)
    workers = stack.cli_json("workers")["workers"]
    victim = next(w for w in workers if w["id"] == before[ids[0]]["owner"])
    victims_streams = [i for i in ids if before[i]["owner"] == victim["id"]]
    os.kill(victim["pid"], signal.SIGKILL)

    def moved_and_flowing() -> bool:
        now = streams_by_id(stack)
        return all(
            held(now[i])
            and now[i]["owner"] != victim["id"]
            and now[i]["last_seq"] > before[i]["last_seq"]
            for i in victims_streams
        )

    wait_until(moved_and_flowing, WAIT, "the killed worker's streams flowing again", stack)
    stack.wait_for_output("killed by SIGKILL")
    stack.wait_for_output("taken over by")

    def fleet_restored() -> bool:
        pids = {w["pid"] for w in stack.cli_json("workers")["workers"]}
        return len(pids) == 3 and victim["pid"] not in pids

    wait_until(fleet_restored, WAIT, "a replacement worker", stack)

    for stream_id in ids:
        assert stack.cli("stop", stream_id).returncode == 0
    wait_until(
        lambda: not any(streams_by_id(stack)[i].get("owner") for i in ids),
        WAIT,
        "the streams released",
        stack,
    )
    report = build_report(
        stack.state_dir / "sink",
        stack.state_dir / "events",
        exits_path=stack.state_dir / "run" / "exits.jsonl",
        stream_ids=ids,
    )
    for summary in report.streams:
        assert summary.messages > 0, summary
        assert summary.missing == 0, summary
        assert summary.violations == (), summary.violations
    for stream_id in victims_streams:
        assert report.stream(stream_id).epochs >= 2


def test_the_stack_survives_its_upstream_simulator_exiting(stack: StackRun) -> None:
    """kill -9 of the upstream simulator: the stack says so and starts it again, moto's state
    and the workers live on, and the streams reconnect and deliver again."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    ids = ["sim-1", "sim-2"]
    for stream_id in ids:
        assert stack.cli("start", stream_id, f"{upstream}/{stream_id}?rate=20").returncode == 0

    def delivering() -> bool:
        now = streams_by_id(stack)
        return all(held(now.get(i)) and now[i].get("last_seq") for i in ids)

    wait_until(delivering, WAIT, "both streams delivering", stack)
    paths = StackPaths(stack.state_dir)
    simulator = int((read_stack_file(paths) or {})["processes"]["upstream"])
    os.kill(simulator, signal.SIGKILL)
    stack.wait_for_output(f"the upstream simulator (pid {simulator}) killed by SIGKILL")
    restarted = [line for line in stack.lines if f"(pid {simulator}) killed" in line]
    assert "restarted" in restarted[0] and "started again" in restarted[0]
    after = streams_by_id(stack)

    def delivering_again() -> bool:
        now = streams_by_id(stack)
        return all(
            held(now[i])
            and now[i]["connection_state"] == "connected"
            and now[i]["last_seq"] > after[i]["last_seq"]
            for i in ids
        )

    wait_until(delivering_again, WAIT, "the streams delivering from the new simulator", stack)
    now = read_stack_file(paths) or {}
    assert int(now["processes"]["upstream"]) != simulator
    assert stack.process.poll() is None
    for stream_id in ids:
        assert stack.cli("stop", stream_id).returncode == 0


def reaper_stop_counts(stack: StackRun) -> list[float]:
    """Every UnplannedTaskStops value the reaper emitted (one per stopped task), in order."""
    counts: list[float] = []
    for line in (stack.state_dir / "logs" / "lambdas.log").read_text().splitlines():
        if line.startswith("{") and ReaperMetric.UNPLANNED_TASK_STOPS in line:
            counts += json.loads(line)[ReaperMetric.UNPLANNED_TASK_STOPS]
    return counts


def test_a_rolled_worker_is_a_planned_stop(stack: StackRun) -> None:
    """SIGTERM of a worker (a roll): it drains and exits 0, the reaper hears of its task's stop
    as a planned one (UnplannedTaskStops 0), and a replacement starts."""
    before = reaper_stop_counts(stack)
    rolled = stack.cli_json("workers")["workers"][0]
    os.kill(rolled["pid"], signal.SIGTERM)
    wait_until(
        lambda: len(reaper_stop_counts(stack)) > len(before), WAIT, "the reaper to run", stack
    )
    stack.wait_for_output(f"{worker_name(rolled['id']).rsplit('-', 1)[0]} exited normally")
    assert reaper_stop_counts(stack) == [*before, 0.0]

    def fleet_restored() -> bool:
        pids = {w["pid"] for w in stack.cli_json("workers")["workers"]}
        return len(pids) == 3 and rolled["pid"] not in pids

    wait_until(fleet_restored, WAIT, "a replacement worker", stack)


def test_a_second_stack_on_the_same_state_directory_touches_nothing(stack: StackRun) -> None:
    """Another ``make run`` on the running stack's directory, even on other ports, refuses
    before it moves or deletes anything, and names the running stack."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    assert stack.cli("start", "kept-1", f"{upstream}/kept-1?rate=20").returncode == 0
    sink = stack.state_dir / "sink" / "kept-1.jsonl"
    wait_until(sink.exists, WAIT, "records of kept-1", stack)
    stack_file = (stack.state_dir / "stack.json").read_text()
    logs = sorted(p.name for p in (stack.state_dir / "logs").iterdir())
    ports = ("MOTO", "API", "UPSTREAM")
    second_env = {**stack.env, **{f"STREAMLEASE_LOCAL_{p}_PORT": str(free_port()) for p in ports}}
    done = subprocess.run(
        [sys.executable, "-m", "local"],
        cwd=REPO,
        env=second_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"another local stack (pid {stack.process.pid};" in done.stdout
    assert f"API on 127.0.0.1:{stack.env['STREAMLEASE_LOCAL_API_PORT']}" in done.stdout
    assert "stopping" not in done.stdout and "starting moto" not in done.stdout
    assert (stack.state_dir / "stack.json").read_text() == stack_file
    assert sink.exists() and not (stack.state_dir / "previous").exists()
    assert sorted(p.name for p in (stack.state_dir / "logs").iterdir()) == logs
    assert stack.cli("stop", "kept-1").returncode == 0


def test_many_streams_start_and_stop_in_one_command(stack: StackRun) -> None:
    """``start -f -`` and ``stop -f -`` with the same JSON lines; stopping again says so."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    ids = [f"many-{n}" for n in range(1, 9)]
    lines = "".join(json.dumps({"id": i, "ws_url": f"{upstream}/{i}?rate=5"}) + "\n" for i in ids)
    started = stack.cli("start", "-f", "-", stdin=lines)
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[-1].endswith("8 created, 0 failed")
    wait_until(
        lambda: all(held(streams_by_id(stack).get(i)) for i in ids), WAIT, "all owned", stack
    )
    stopped = stack.cli("stop", "-f", "-", stdin=lines)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines()[-1].endswith("8 stopping, 0 failed")
    again = stack.cli("stop", *ids[:2])
    assert again.returncode == 0
    assert again.stdout.count("already stopped:") == 2


def test_the_console_names_workers_as_the_cli_does(stack: StackRun) -> None:
    """Each live worker's name in ``streamlease workers`` extends a name the console used."""
    rows = stack.cli("workers").stdout.splitlines()[1:]
    for worker in stack.cli_json("workers")["workers"]:
        name = worker_name(worker["id"])
        assert any(row.startswith(name) for row in rows)
        process = name.rpartition("-")[0]
        assert f"{process} started" in stack.output


def test_watch_once_shows_streams_and_workers(stack: StackRun) -> None:
    """``streamlease watch --once`` prints one frame of the running stack."""
    done = stack.cli("watch", "--once")
    assert done.returncode == 0, done.stderr
    assert "WORKER" in done.stdout and "live" not in done.stderr
    assert "workers 3" in done.stdout or "workers 2" in done.stdout


def test_api_errors_reach_the_cli_as_one_line(stack: StackRun) -> None:
    """The real handler's errors come back through the adapter: exit 1, one readable line."""
    missing = stack.cli("get", "no-such-stream")
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1
    assert "404" in missing.stderr
    bad = stack.cli("start", "bad-url", "http://example.com/x")
    assert bad.returncode == 1
    assert "ws_url" in bad.stderr


def test_bad_input_is_refused_through_the_local_api(stack: StackRun) -> None:
    """A credential in the URL's own query: 400 naming the parameter, its value never echoed,
    nothing created. A field stop does not take: 400 naming it, the stream left as it was."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    secret_url = f"{upstream}/cred-1?channel=btc&api_key=hunter2"
    refused = stack.cli("--json", "start", "cred-1", secret_url)
    assert refused.returncode == 1
    [result] = json.loads(refused.stdout)["results"]
    assert (result["error"]["status"], result["error"]["field"]) == (400, "ws_url")
    assert "api_key" in result["error"]["message"] and "hunter2" not in refused.stdout
    assert stack.cli("get", "cred-1").returncode == 1
    assert stack.cli("start", "stop-1", f"{upstream}/stop-1?rate=1").returncode == 0
    request = urllib.request.Request(
        f"{stack.env['STREAMLEASE_API_URL']}/streams/stop-1/stop",
        data=json.dumps({"force": True}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=30)
    error = json.loads(answer.value.read())["error"]
    assert (answer.value.code, error["field"]) == (400, "force")
    assert stack.cli_json("get", "stop-1")["desired_state"] == "STARTED"
    assert stack.cli("stop", "stop-1").returncode == 0


def test_a_missing_secret_is_named_at_start_on_stderr(stack: StackRun) -> None:
    """Created (exit 0): the secret may come after its stream; stderr names the secret and the
    command that stores it."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    header = "Authorization=Bearer {secret:streamlease/not-yet#token}"
    started = stack.cli("start", "sec-1", f"{upstream}/sec-1?rate=1", "--header", header)
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("created sec-1")
    assert "warning" in started.stderr
    assert "streamlease secret put streamlease/not-yet" in started.stderr
    assert stack.cli("stop", "sec-1").returncode == 0


def test_ctrl_c_stops_everything_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """Ctrl-C: exit status 0, every process the stack started is gone, its ports are free."""
    run = StackRun.start(stack_env(tmp_path, workers=1))
    try:
        run.wait_for_output("streamlease is running locally", START_TIMEOUT)
        info = json.loads((tmp_path / "stack.json").read_text())
        pids = [*info["processes"].values(), *(w["pid"] for w in info["workers"])]
        assert len(pids) == 4  # moto, upstream simulator, API, one worker
        assert run.interrupt() == 0
    finally:
        run.kill()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for name in ("MOTO", "API", "UPSTREAM"):
        assert not port_in_use("127.0.0.1", int(run.env[f"STREAMLEASE_LOCAL_{name}_PORT"]))
    assert not (tmp_path / "stack.json").exists()
    assert "stopped;" in run.output


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    """A taken API port: one line naming the port and the setting, exit status 1, nothing run."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = stack_env(tmp_path, workers=1)
        env["STREAMLEASE_LOCAL_API_PORT"] = str(port)
        done = subprocess.run(
            [sys.executable, "-m", "local"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"port {port} (API) is in use" in done.stdout
    assert "STREAMLEASE_LOCAL_API_PORT" in done.stdout
    assert not (tmp_path / "stack.json").exists()
