"""The local stack with the Kinesis sink (``STREAMLEASE_LOCAL_SINK=kinesis``): its workers write
the record format a consumer reads on AWS (KPL-aggregated, on moto's Kinesis), and
``streamlease consume`` reads it back exactly once per message, also across a ``kill -9``."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator

import pytest
from local_stack_run import WAIT, StackRun, held, running_stack, streams_by_id, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with running_stack(tmp_path_factory.mktemp("kinesis"), workers=2, local_sink="kinesis") as run:
        yield run


def test_the_banner_names_the_kinesis_stream_and_the_command_that_reads_it(
    stack: StackRun,
) -> None:
    """With the Kinesis sink the banner says where records go instead of the sink folder."""
    assert "sink       Kinesis stream" in stack.output
    assert "streamlease consume" in stack.output


def test_consume_reads_each_message_once_in_order_across_a_kill_9(stack: StackRun) -> None:
    """Two streams, their holder killed (the fleet resumes them from its checkpoint, repeating
    what it delivered since), then stopped: ``consume`` prints every seq of each once, in
    order, and its summary counts what the raw stream repeated."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    ids = ["kin-1", "kin-2"]
    for stream_id in ids:
        done = stack.cli("start", stream_id, f"{upstream}/{stream_id}?rate=20")
        assert done.returncode == 0, done.stderr
    wait_until(
        lambda: all(held(streams_by_id(stack).get(i)) for i in ids), WAIT, "all owned", stack
    )
    before = streams_by_id(stack)
    victim = next(
        w for w in stack.cli_json("workers")["workers"] if w["id"] == before["kin-1"]["owner"]
    )
    wait_until(
        lambda: (streams_by_id(stack)["kin-1"]["last_seq"] or 0) >= 20, WAIT, "kin-1 flows", stack
    )
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(
        lambda: held(now := streams_by_id(stack)["kin-1"]) and now["owner"] != victim["id"],
        WAIT,
        "kin-1 taken over",
        stack,
    )
    for stream_id in ids:
        assert stack.cli("stop", stream_id, "--wait").returncode == 0

    done = stack.cli("consume", *ids, "--from", "trim-horizon", "--until-idle", "2", "--json")
    assert done.returncode == 0, done.stderr
    seqs: dict[str, list[int]] = {}
    for line in done.stdout.splitlines():
        message = json.loads(line)
        seqs.setdefault(message["stream_id"], []).append(message["seq"])
    assert set(seqs) == set(ids)
    for stream_id, got in seqs.items():
        assert got == list(range(1, got[-1] + 1)), stream_id
        assert got[-1] >= 20
    summary = json.loads(done.stderr.strip().splitlines()[-1])["summary"]
    assert summary["problems"] == []
    counts = summary["streams"]
    assert all(counts[i]["gaps"] == 0 and counts[i]["messages"] == len(seqs[i]) for i in ids)
