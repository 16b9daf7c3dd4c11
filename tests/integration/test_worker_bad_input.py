"""Hostile or broken input never stops a worker: poison commands, garbage upstream frames."""

from __future__ import annotations

import pytest
from worker_helpers import (
    Fleet,
    Streams,
    assert_no_gap,
    new_ids,
)

from local.upstream_sim import UpstreamSimulator
from streamlease.telemetry import WorkerMetric

pytestmark = pytest.mark.slow

POISON = (
    "not json at all",
    "[1, 2, 3]",
    '{"v": 1, "type": "START"}',
    '{"v": 99, "type": "START", "stream_id": "x", "generation": 1}',
    '{"v": 1, "type": "EXPLODE", "stream_id": "x", "generation": 1}',
)


def test_malformed_commands_are_deleted_logged_and_the_worker_keeps_going(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """Poison messages are deleted (not redelivered, not left for the DLQ) and logged with
    their message id but never their body; a valid command sent after them still works."""
    worker = fleet.start()
    for body in POISON:
        streams.send(body)
    # An idle worker polls (a worker at its fair share would leave commands to others).
    fleet.wait(lambda: streams.queue_depth() == 0, 20, "every poison message deleted")
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_seq(stream_id, 5)
    fleet.wait(lambda: streams.queue_depth() == 0, 10, "the start command deleted")

    assert streams.queue_depth(dead_letter=True) == 0
    logs = fleet.log_records(worker)
    poisoned = [r for r in logs if r.get("message") == "malformed command deleted"]
    assert len(poisoned) == len(POISON)
    assert all(r.get("message_id") for r in poisoned)
    text = worker.log_path.read_text()
    assert "not json at all" not in text and "EXPLODE" not in text


def test_garbage_upstream_frames_are_counted_not_fatal(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """Frames that are not JSON, have no integer seq or are binary are skipped and counted
    (MalformedFrames); the stream keeps delivering every real message in order."""
    worker = fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id, garbage_every=3))
    fleet.wait_seq(stream_id, 30)

    seqs = fleet.seqs(stream_id)
    assert seqs == sorted(seqs)
    assert_no_gap(seqs)

    def malformed_counted() -> int:
        return sum(
            int(sum(r.get(WorkerMetric.MALFORMED_FRAMES, [])))
            for r in fleet.log_records(worker)
            if "_aws" in r
        )

    fleet.wait(malformed_counted, 5, "MalformedFrames emitted")
    assert upstream.stats(stream_id).accepted == 1, "garbage did not cost a reconnect"
