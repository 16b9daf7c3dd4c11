"""End to end through the local stack and the CLI only: the feed shapes of the second round —
an exclusive ``after=`` resume, a ``Last-Event-ID`` header, a login by message answered before
the subscription, required client pings — each across feed restarts and a ``kill -9`` of its
holder, with no seq missing and the login's secret nowhere; and a stream's URL changed in place
through ``streamlease set``: the holder reconnects with it under the same lease, from its
checkpoint, without a gap and without a second holder."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest
from local_stack_run import WAIT, StackRun, held, running_stack, streams_by_id, wait_until

from local.sink_report import build_report
from local.worker_process import DUMMY_AWS_ENV
from worker.sinks.file import read_records, sink_file_name

LOGIN_KEY = "PKe2e-l0gin-k3y-9c41"
LOGIN_SECRET = "streamlease/e2e-login"
RESTART_EVERY = 15
"""Messages after which the simulated feed drops each connection (a feed restart)."""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with running_stack(tmp_path_factory.mktemp("changes"), workers=2) as run:
        yield run


def feed_url(stack: StackRun, stream_id: str, **query: Any) -> str:
    port = stack.env["STREAMLEASE_LOCAL_UPSTREAM_PORT"]
    return f"ws://127.0.0.1:{port}/{stream_id}?{urlencode({'rate': 20, **query})}"


def records(stack: StackRun, stream_id: str) -> list[dict[str, Any]]:
    path = stack.state_dir / "sink" / sink_file_name(stream_id)
    return list(read_records(path)) if path.exists() else []


def events(stack: StackRun, stream_id: str) -> list[dict[str, Any]]:
    found = []
    for path in sorted((stack.state_dir / "events").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("stream_id") == stream_id:
                found.append(event)
    return sorted(found, key=lambda e: e["mono"])


def test_a_url_changed_in_place_keeps_the_holder_the_epoch_and_every_seq(
    stack: StackRun,
) -> None:
    """``set --url`` to another host name of the feed: generation + 1, the same owner and
    epoch, a ``changed`` lease event, the next connection asks for what follows the last
    message taken in, and the sink shows no seq missing."""
    port = stack.env["STREAMLEASE_LOCAL_UPSTREAM_PORT"]
    first = f"ws://127.0.0.1:{port}/move-1?rate=20"
    moved = f"ws://localhost:{port}/move-1?rate=20"
    done = stack.cli("start", "move-1", first)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: len(records(stack, "move-1")) >= 10, WAIT, "move-1 flowing", stack)
    before = stack.cli_json("get", "move-1")
    assert held(before)

    changed = stack.cli("set", "move-1", "--url", moved)
    assert changed.returncode == 0, changed.stderr
    assert f"generation {before['generation'] + 1}" in changed.stdout

    wait_until(
        lambda: any(e["event"] == "changed" for e in events(stack, "move-1")),
        WAIT,
        "the holder took the change",
        stack,
    )
    taken = len(records(stack, "move-1"))
    wait_until(
        lambda: len(records(stack, "move-1")) >= taken + 10, WAIT, "move-1 flowing on", stack
    )
    after = stack.cli_json("get", "move-1")
    assert after["ws_url"] == moved
    assert (after["owner"], after["epoch"]) == (before["owner"], before["epoch"])
    assert after["last_seq"] >= before["last_seq"]
    kinds = [e["event"] for e in events(stack, "move-1")]
    assert kinds.count("acquired") == 1 and "released" not in kinds

    assert stack.cli("stop", "move-1").returncode == 0
    wait_until(lambda: not streams_by_id(stack)["move-1"].get("owner"), WAIT, "released", stack)
    report = build_report(
        stack.state_dir / "sink",
        stack.state_dir / "events",
        exits_path=stack.state_dir / "run" / "exits.jsonl",
        stream_ids=["move-1"],
    )
    (summary,) = report.streams
    assert summary.messages > 0 and summary.missing == 0, summary
    assert summary.violations == (), summary.violations


SHAPES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # feed knobs, profile
    "after": (
        {"drop_after": RESTART_EVERY},
        {"query": {"after": "{last_seq}"}},
    ),
    "header": (
        {"last_event_id": 1, "drop_after": RESTART_EVERY},
        {"headers": {"Last-Event-ID": "{last_seq}"}, "resume": "header"},
    ),
    "login": (
        {
            "login": hashlib.sha256(LOGIN_KEY.encode()).hexdigest(),
            "subscribe": 1,
            "drop_after": RESTART_EVERY,
        },
        {
            "open_messages": [
                {
                    "send": '{"action":"auth","params":"{secret:' + LOGIN_SECRET + '#key}"}',
                    "expect": {"status": "auth_success"},
                    "refuse": {"status": "auth_failed"},
                },
                '{"type":"subscribe","after":{last_seq}}',
            ],
            "resume": "open_message",
        },
    ),
    "ping": (
        {"ping_within": 2.5, "drop_after": 100},
        {"ping": {"send": '{"op":"ping"}', "interval_seconds": 1}, "control": [{"op": "pong"}]},
    ),
}


def owner_pid(stack: StackRun, stream_id: str) -> tuple[str, int]:
    owner = stack.cli_json("get", stream_id)["owner"]
    workers = stack.cli_json("workers")["workers"]
    return owner, next(w["pid"] for w in workers if w["id"] == owner)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_feed_shape_survives_restarts_and_a_kill_9_without_a_gap(
    stack: StackRun, shape: str
) -> None:
    """The first record is the feed's first message; the feed drops every connection after a
    few messages and the holder is killed with SIGKILL once: the sink has every seq once
    delivered, from every epoch in order, and the login's key is in no file, no console line
    and no API answer."""
    if shape == "login":
        secrets_client(stack).create_secret(
            Name=LOGIN_SECRET, SecretString=json.dumps({"key": LOGIN_KEY})
        )
    knobs, profile = SHAPES[shape]
    stream_id = f"shape-{shape}"
    done = stack.cli(
        "start", stream_id, feed_url(stack, stream_id, **knobs), "--profile", json.dumps(profile)
    )
    assert done.returncode == 0, done.stderr
    wait_until(lambda: len(records(stack, stream_id)) >= 2 * RESTART_EVERY, WAIT, "flowing", stack)
    assert records(stack, stream_id)[0]["seq"] == 1

    victim, pid = owner_pid(stack, stream_id)
    before = len(records(stack, stream_id))
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: (
            (streams_by_id(stack)[stream_id].get("owner") or victim) != victim
            and len(records(stack, stream_id)) >= before + 2 * RESTART_EVERY
        ),
        WAIT,
        f"{stream_id} flowing under a new holder",
        stack,
    )
    if shape == "ping":  # pongs come back (counted as control frames, reported on reconnects)
        wait_until(
            lambda: (streams_by_id(stack)[stream_id].get("frames_control") or 0) > 0,
            WAIT,
            "pongs counted",
            stack,
        )
    assert stack.cli("stop", stream_id).returncode == 0
    wait_until(lambda: not streams_by_id(stack)[stream_id].get("owner"), WAIT, "released", stack)
    shown = stack.cli("get", stream_id, "--json")
    report = build_report(
        stack.state_dir / "sink",
        stack.state_dir / "events",
        exits_path=stack.state_dir / "run" / "exits.jsonl",
        stream_ids=[stream_id],
    )
    (summary,) = report.streams
    assert summary.messages > 0 and summary.missing == 0, summary
    assert summary.violations == (), summary.violations
    seqs = sorted({r["seq"] for r in records(stack, stream_id)})
    assert seqs == list(range(1, seqs[-1] + 1))
    assert len({r["epoch"] for r in records(stack, stream_id)}) >= 2
    if shape == "login":
        assert LOGIN_KEY not in shown.stdout and LOGIN_KEY not in stack.output
        for path in stack.state_dir.rglob("*"):
            if path.is_file():
                assert LOGIN_KEY.encode() not in path.read_bytes(), path


def secrets_client(stack: StackRun) -> Any:
    """Secrets Manager of the local stack (moto)."""
    return boto3.client(
        "secretsmanager",
        endpoint_url=f"http://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_MOTO_PORT']}",
        region_name=DUMMY_AWS_ENV["AWS_REGION"],
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )
