"""End to end with real-feed profiles: ``streamlease start`` with profile flags against the local
stack (API, workers, moto as Secrets Manager, the upstream simulator in each feed mode), checked
in the file sink's records. One stack for the module."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest
from local_stack_run import WAIT, StackRun, held, running_stack, streams_by_id, wait_until

from local.sink_report import build_report
from local.upstream_sim import binary_payload_for, payload_for, payload_path
from local.worker_process import DUMMY_AWS_ENV
from worker.sinks.file import read_records, sink_file_name

pytestmark = pytest.mark.slow

TOKEN = "feed-token-4f1c9a"
ROTATED = "feed-token-rotated-77be02"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with running_stack(tmp_path_factory.mktemp("feeds"), workers=2) as run:
        yield run


def feed_url(stack: StackRun, stream_id: str, **query: Any) -> str:
    port = stack.env["STREAMLEASE_LOCAL_UPSTREAM_PORT"]
    return f"ws://127.0.0.1:{port}/{stream_id}?{urlencode({'rate': 20, **query})}"


def secrets(stack: StackRun) -> Any:
    port = stack.env["STREAMLEASE_LOCAL_MOTO_PORT"]
    return boto3.client(
        "secretsmanager",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name=DUMMY_AWS_ENV["AWS_REGION"],
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def records(stack: StackRun, stream_id: str) -> list[dict[str, Any]]:
    path = stack.state_dir / "sink" / sink_file_name(stream_id)
    return list(read_records(path)) if path.exists() else []


def start(stack: StackRun, stream_id: str, url: str, *flags: str) -> None:
    done = stack.cli("start", stream_id, url, *flags)
    assert done.returncode == 0, done.stderr


def flowing(stack: StackRun, stream_id: str, count: int = 10) -> list[dict[str, Any]]:
    """Wait until the sink holds ``count`` records of the stream; returns them."""
    wait_until(lambda: len(records(stack, stream_id)) >= count, WAIT, f"{stream_id} flowing", stack)
    return records(stack, stream_id)


def stop_and_check(stack: StackRun, stream_ids: list[str], **report: Any) -> None:
    """Stop the streams; the sink and lease events must show no gap and no safety violation."""
    for stream_id in stream_ids:
        assert stack.cli("stop", stream_id).returncode == 0
    wait_until(
        lambda: not any(streams_by_id(stack)[i].get("owner") for i in stream_ids),
        WAIT,
        "the streams released",
        stack,
    )
    result = build_report(
        stack.state_dir / "sink",
        stack.state_dir / "events",
        exits_path=stack.state_dir / "run" / "exits.jsonl",
        stream_ids=stream_ids,
        **report,
    )
    for summary in result.streams:
        assert summary.messages > 0, summary
        assert summary.missing == 0, summary
        assert summary.violations == (), summary.violations


def files_under(root: Path) -> Iterator[Path]:
    return (p for p in root.rglob("*") if p.is_file())


def test_a_bearer_token_from_secrets_manager_and_its_rotation(stack: StackRun) -> None:
    """The header names a secret; the worker reads it from Secrets Manager (moto) at connect
    time. The upstream refuses the old token: the stream stays held as rejected with a 401;
    once the secret is rotated, the next attempt reads it afresh and the stream flows. The
    token never reaches the table, the API, a log or the sink."""
    client = secrets(stack)
    client.create_secret(Name="streamlease/e2e-feed", SecretString=json.dumps({"token": TOKEN}))
    url = feed_url(stack, "auth-1", bearer=ROTATED)
    start(
        stack, "auth-1", url, "--header", "Authorization=Bearer {secret:streamlease/e2e-feed#token}"
    )

    def rejected() -> bool:
        stream = streams_by_id(stack).get("auth-1") or {}
        return stream.get("connection_state") == "rejected"

    wait_until(rejected, WAIT, "auth-1 rejected with the old token", stack)
    shown = stack.cli_json("get", "auth-1")
    assert "401" in (shown.get("last_error") or "")
    assert shown["profile"]["headers"] == {
        "Authorization": "Bearer {secret:streamlease/e2e-feed#token}"
    }
    assert records(stack, "auth-1") == []

    client.put_secret_value(
        SecretId="streamlease/e2e-feed", SecretString=json.dumps({"token": ROTATED})
    )
    flowing(stack, "auth-1")
    wait_until(
        lambda: streams_by_id(stack)["auth-1"].get("connection_state") == "connected",
        WAIT,
        "auth-1 connected",
        stack,
    )
    stop_and_check(stack, ["auth-1"])
    assert_no_token(stack)


def assert_no_token(stack: StackRun) -> None:
    """Neither token is in any file of the stack: table dumps, logs, sink."""
    for path in files_under(stack.state_dir):
        text = path.read_bytes()
        assert TOKEN.encode() not in text and ROTATED.encode() not in text, path


def test_a_subscribe_message_resumes_from_the_checkpoint_after_a_stop(stack: StackRun) -> None:
    """The open message subscribes from the checkpoint: after a stop and a start the stream
    goes on where it was, without a gap (each epoch subscribes from its checkpoint)."""
    url = feed_url(stack, "sub-1", subscribe=1, ack=1)
    start(
        stack,
        "sub-1",
        url,
        "--open-message",
        '{"type":"subscribe","from":{next_seq}}',
        "--resume",
        "open_message",
    )
    first = flowing(stack, "sub-1")
    assert stack.cli("stop", "sub-1").returncode == 0
    wait_until(lambda: not streams_by_id(stack)["sub-1"].get("owner"), WAIT, "released", stack)
    checkpoint = streams_by_id(stack)["sub-1"]["last_seq"]
    assert checkpoint >= first[-1]["seq"]
    assert stack.cli("resume", "sub-1").returncode == 0
    wait_until(
        lambda: any(r["seq"] > checkpoint + 5 for r in records(stack, "sub-1")),
        WAIT,
        "sub-1 flowing again",
        stack,
    )
    stop_and_check(stack, ["sub-1"])
    seqs = [r["seq"] for r in records(stack, "sub-1")]
    assert sorted(set(seqs)) == list(range(1, max(seqs) + 1))
    assert len({r["epoch"] for r in records(stack, "sub-1")}) >= 2


def test_the_seq_from_the_feeds_own_field(stack: StackRun) -> None:
    url = feed_url(stack, "nested-1", seq_field="data.u")
    start(stack, "nested-1", url, "--seq-path", "data.u")
    for record in flowing(stack, "nested-1"):
        payload = record["payload"]
        assert record["payload_encoding"] == "json"
        assert payload["data"]["u"] == record["seq"]
        assert payload["data"]["d"] == payload_for("nested-1", record["seq"])
    assert payload_path("data.u") == "data.d"
    stop_and_check(stack, ["nested-1"])


def test_binary_frames_reach_the_sink_intact(stack: StackRun) -> None:
    """Binary frames, numbered by the worker: base64 in the sink, byte for byte what was sent."""
    start(stack, "bin-1", feed_url(stack, "bin-1", binary=1, first_seq=0), "--seq-path", "none")
    for record in flowing(stack, "bin-1"):
        assert record["payload_encoding"] == "base64"
        assert base64.b64decode(record["payload"]) == binary_payload_for("bin-1", record["seq"])
    shown = stack.cli_json("get", "bin-1")
    assert shown["profile"]["seq"] == "none"
    assert "repeat" in shown["failover_note"]  # what a failover can do to such a feed
    stop_and_check(stack, ["bin-1"])


def test_frames_without_a_seq_are_numbered_by_the_worker(stack: StackRun) -> None:
    start(stack, "plain-1", feed_url(stack, "plain-1", noseq=1, first_seq=0), "--seq-path", "none")
    for record in flowing(stack, "plain-1"):
        assert record["payload_encoding"] == "text"
        assert json.loads(record["payload"])["data"] == payload_for("plain-1", record["seq"])
    stop_and_check(stack, ["plain-1"])


def test_a_subprotocol(stack: StackRun) -> None:
    url = feed_url(stack, "proto-1", subprotocol="feed.v2")
    start(stack, "proto-1", url, "--subprotocol", "feed.v2")
    flowing(stack, "proto-1", 5)
    assert held(streams_by_id(stack)["proto-1"])
    stop_and_check(stack, ["proto-1"])
