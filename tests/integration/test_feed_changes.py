"""End to end: a stream's URL changed in place through ``streamlease set`` against the local
stack — the holder reconnects with it under the same lease, from its checkpoint, without a gap
and without a second holder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from local_stack_run import WAIT, StackRun, held, running_stack, streams_by_id, wait_until

from local.sink_report import build_report
from worker.sinks.file import read_records, sink_file_name

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with running_stack(tmp_path_factory.mktemp("changes"), workers=2) as run:
        yield run


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
