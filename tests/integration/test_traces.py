"""One trace from ``POST /streams`` to the worker: the API call's trace header travels in the SQS
command, and the worker's acquire span (then its first batch) joins that very trace.

Real processes: the local API (API Gateway's proxy event, the real handler), the serialised moto
server's SQS, a ``python -m worker`` exporting its spans to a file, the upstream simulator.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import Fleet, new_ids

from local.upstream_sim import UpstreamSimulator
from local.worker_process import ApiProcess
from streamlease import aws
from streamlease.settings import Settings
from streamlease.telemetry import TRACE_HTTP_HEADER, TRACE_MESSAGE_ATTRIBUTE, SpanName, TraceExport

pytestmark = pytest.mark.slow

ROOT = "1-6749f3a4-0123456789abcdef01234567"
CALLER = "53995c3f42cd8ad8"
HEADER = f"Root={ROOT};Parent={CALLER};Sampled=1"


def _post_stream(api_url: str, stream_id: str, ws_url: str) -> int:
    request = urllib.request.Request(
        f"{api_url.rstrip('/')}/streams",
        data=json.dumps({"id": stream_id, "ws_url": ws_url}).encode(),
        headers={"Content-Type": "application/json", TRACE_HTTP_HEADER: HEADER},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def _spans(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_one_trace_id_runs_from_post_streams_through_the_command_to_the_acquire(
    settings: Settings, fleet: Fleet, upstream: UpstreamSimulator, tmp_path: Path
) -> None:
    """The command carries the request's trace; the worker's acquire is its child, the connect
    and the first delivered batch the acquire's."""
    (stream_id,) = new_ids(1)
    api = ApiProcess.start(settings, tmp_path / "logs" / "api.log")
    try:
        assert _post_stream(api.url, stream_id, upstream.url_for(stream_id)) == 201
    finally:
        api.stop()

    # The SQS message, as the worker will receive it (then made visible again for the worker).
    sqs = aws.client("sqs", settings)
    received = sqs.receive_message(
        QueueUrl=settings.queue_url,
        WaitTimeSeconds=5,
        MessageSystemAttributeNames=[TRACE_MESSAGE_ATTRIBUTE],
    )
    (message,) = received["Messages"]
    assert json.loads(message["Body"])["stream_id"] == stream_id
    assert message["Attributes"][TRACE_MESSAGE_ATTRIBUTE] == HEADER
    sqs.change_message_visibility(
        QueueUrl=settings.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )

    traces = tmp_path / "traces" / "worker.jsonl"
    fleet.start(trace_export=TraceExport.FILE, trace_file=str(traces))
    fleet.wait_owned([stream_id])
    fleet.wait_seq(stream_id, 5)

    trace_id = "0x" + ROOT[2:].replace("-", "")
    deadline = time.monotonic() + 15
    names: dict[str, dict[str, Any]] = {}
    expected = {SpanName.ACQUIRE, SpanName.CONNECT, SpanName.FIRST_BATCH}
    while time.monotonic() < deadline and not expected <= set(names):
        names = {s["name"]: s for s in _spans(traces) if s["context"]["trace_id"] == trace_id}
        time.sleep(0.2)
    acquire, first = names[SpanName.ACQUIRE], names[SpanName.FIRST_BATCH]
    connect = names[SpanName.CONNECT]
    assert acquire["parent_id"] == "0x" + CALLER
    assert acquire["attributes"]["streamlease.stream_id"] == stream_id
    assert acquire["attributes"]["streamlease.outcome"] == "won"
    assert first["parent_id"] == acquire["context"]["span_id"]
    assert connect["parent_id"] == acquire["context"]["span_id"]
    assert connect["attributes"]["streamlease.attempt"] == 1
    assert connect["end_time"] <= first["end_time"]
