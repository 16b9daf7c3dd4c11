"""``streamlease consume`` as a user runs it: a real process reading the sink stream on the moto
server, written by the worker's own Kinesis sink, found through a local stack's description.

The stream holds what fencing lets through in the worst case: a range delivered twice (a holder
that could not hand over) and a batch of an older epoch that arrived after the newer holder's
(a worker frozen between its last fence check and its write). Each message comes out once, in
order, of the newest epoch; the summary on stderr counts what was dropped; ``--raw`` shows it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.api_adapter import ApiAdapter, serving
from local.gateway_events import json_response, load_resources
from streamlease.settings import Settings
from worker.sinks import BatchHeader, KinesisSink, NoDeadline, SinkRecord, write_batch

pytestmark = pytest.mark.slow

CLI = Path(sys.executable).with_name("streamlease")
RECEIVED_MS = 1_700_000_000_000


def no_function(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"statusCode": 200, "headers": {}, "body": "{}"}


async def deliver(settings: Settings, batches: list[tuple[str, int, list[int]]]) -> None:
    """Each ``(stream id, epoch, seqs)`` written as one batch by the worker's Kinesis sink, in
    this order."""
    sink = KinesisSink(settings)
    for stream_id, epoch, seqs in batches:
        records = [SinkRecord(s, RECEIVED_MS + s, b'{"n":%d}' % s) for s in seqs]
        await write_batch(sink, BatchHeader(stream_id, epoch, "w-1"), records, NoDeadline())
    await sink.close()


@pytest.fixture
def stack_api(aws_settings: Settings) -> Iterator[str]:
    """A local stack's API whose description names the moto server and the test's stream."""
    description = {
        "moto_url": aws_settings.aws_endpoint_url,
        "aws_region": aws_settings.aws_region,
        "kinesis_stream_name": aws_settings.kinesis_stream_name,
    }
    pages = {"/local/stack": lambda _: json_response(description)}
    with serving(ApiAdapter(no_function, load_resources(), pages=pages)) as url:
        yield url


def consume(api: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``streamlease --api API consume --until-idle 1 ARGS`` as a process of its own."""
    return subprocess.run(
        [str(CLI), "--api", api, "consume", "--until-idle", "1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        check=False,
    )


def lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def positions(messages: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(m["stream_id"], m["epoch"], m["seq"]) for m in messages]


WRITES = [
    ("a", 2, [1, 2, 3]),
    ("b", 1, [1, 2]),
    ("a", 2, [2, 3, 4]),  # 2 and 3 again: a holder that could not hand over
    ("a", 3, [5, 6]),  # the next holder
    ("a", 2, [5]),  # the old holder's late write, after the new epoch's
]


async def test_each_message_comes_out_once_in_order_and_the_summary_counts_the_rest(
    aws_settings: Settings, stack_api: str
) -> None:
    """Stdout: every message once, in order, never of a superseded epoch; stderr: the
    repeats and the stale one per stream."""
    await deliver(aws_settings, WRITES)
    done = await asyncio.to_thread(consume, stack_api, "--json")
    assert done.returncode == 0, done.stderr
    out = lines(done.stdout)
    assert positions(out) == [
        ("a", 2, 1),
        ("a", 2, 2),
        ("a", 2, 3),
        ("b", 1, 1),
        ("b", 1, 2),
        ("a", 2, 4),
        ("a", 3, 5),
        ("a", 3, 6),
    ]
    first = out[0]
    assert first["payload"] == {"n": 1} or first["payload"] == '{"n":1}'
    assert first["payload_encoding"] == "json"
    assert first["received_at_ms"] == RECEIVED_MS + 1
    summary = json.loads(done.stderr.splitlines()[-1])["summary"]
    assert summary["streams"]["a"]["messages"] == 6
    assert summary["streams"]["a"]["repeats"] == 2
    assert summary["streams"]["a"]["stale"] == 1
    assert summary["streams"]["b"]["messages"] == 2
    assert not any(v for k, v in summary["streams"]["b"].items() if k != "messages")
    assert summary["problems"] == []


async def test_the_summary_is_the_sinks_check_of_gaps_and_repeats_per_stream(
    aws_settings: Settings, stack_api: str
) -> None:
    """docs/reading-records.md's check of the Kinesis sink: the messages go to /dev/null, the
    table on stderr counts each stream's repeats (3 again from the next holder) and its gap (5
    never written)."""
    await deliver(aws_settings, [("a", 1, [1, 2, 3]), ("a", 2, [3, 4, 6]), ("b", 1, [1, 2])])
    done = await asyncio.to_thread(consume, stack_api)
    assert done.returncode == 0, done.stderr
    table = [line.split() for line in done.stderr.splitlines()]
    assert table == [
        ["STREAM", "MESSAGES", "REPEATS", "STALE", "GAPS", "MISSING"],
        ["a", "5", "1", "0", "1", "1"],
        ["b", "2", "0", "0", "0", "0"],
    ]


async def test_stream_ids_choose_what_is_printed(aws_settings: Settings, stack_api: str) -> None:
    """Only the streams named; the summary too. Human output is a table."""
    await deliver(aws_settings, WRITES)
    done = await asyncio.to_thread(consume, stack_api, "b")
    assert done.returncode == 0, done.stderr
    assert positions(lines(done.stdout)) == [("b", 1, 1), ("b", 1, 2)]
    assert done.stderr.splitlines()[0].split() == [
        "STREAM",
        "MESSAGES",
        "REPEATS",
        "STALE",
        "GAPS",
        "MISSING",
    ]
    assert done.stderr.splitlines()[1].split() == ["b", "2", "0", "0", "0", "0"]
    assert len(done.stderr.splitlines()) == 2


async def test_raw_shows_the_repeats_and_the_stale_epoch(
    aws_settings: Settings, stack_api: str
) -> None:
    """``--raw``: every message as the stream holds it."""
    await deliver(aws_settings, WRITES)
    done = await asyncio.to_thread(consume, stack_api, "--raw", "a")
    assert done.returncode == 0, done.stderr
    assert positions(lines(done.stdout)) == [
        ("a", 2, 1),
        ("a", 2, 2),
        ("a", 2, 3),
        ("a", 2, 2),
        ("a", 2, 3),
        ("a", 2, 4),
        ("a", 3, 5),
        ("a", 3, 6),
        ("a", 2, 5),
    ]


async def test_a_missing_stream_is_named_and_exits_1(stack_api: str) -> None:
    """A stream name that does not exist: one clear line, exit 1."""
    done = await asyncio.to_thread(consume, stack_api, "--stream", "no-such-stream")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "streamlease: the Kinesis stream 'no-such-stream' does not exist (or has no such shard)"
    )
    assert done.stdout == ""


async def test_usage_errors_exit_2(stack_api: str) -> None:
    """A bad --from or --until-idle is refused before anything is read."""
    for args in (["--from", "yesterday"], ["--until-idle", "0"]):
        done = await asyncio.to_thread(consume, stack_api, *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("streamlease: error: ")


def test_ctrl_c_ends_cleanly_with_the_summary(aws_settings: Settings, stack_api: str) -> None:
    """Without --until-idle it reads until interrupted; SIGINT prints the summary, exit 0."""
    asyncio.run(deliver(aws_settings, [("a", 1, [1, 2])]))
    process = subprocess.Popen(
        [str(CLI), "--api", stack_api, "--json", "consume"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()  # reading has begun
    assert json.loads(first)["seq"] == 1
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)
    assert process.stderr is not None
    out, err = process.stdout.read(), process.stderr.read()
    assert process.returncode == 0, err
    assert positions(lines(out)) == [("a", 1, 2)]
    assert json.loads(err.splitlines()[-1])["summary"]["streams"]["a"]["messages"] == 2
