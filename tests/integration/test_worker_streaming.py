"""The worker's day: take a started stream, deliver it in order, stop it, publish itself, exit.

Real ``python -m worker`` processes against the serialised moto server and the upstream
simulator, with timers scaled to a 1 s lease.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from worker_helpers import (
    HEARTBEAT_SECONDS,
    Fleet,
    Streams,
    assert_no_gap,
    new_ids,
)

from local.upstream_sim import UpstreamSimulator
from local.worker_process import REPO_ROOT
from streamlease import aws
from streamlease.model import WorkerInfo
from streamlease.schema import WorkerState
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from streamlease.sink_fields import SinkField

pytestmark = pytest.mark.slow


def test_started_stream_is_owned_and_delivered_in_order(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """A START command makes a worker own the stream; the sink gets seq 1, 2, 3, ... in order,
    each record stamped with the stream, the lease epoch, the worker and the upstream frame."""
    worker = fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_owned([stream_id])
    fleet.wait_seq(stream_id, 40)

    records = fleet.records(stream_id)
    seqs = [r[SinkField.SEQ] for r in records]
    assert seqs == list(range(1, len(seqs) + 1))
    item = streams.read(stream_id)
    assert item.owner == worker.worker_id
    assert {r[SinkField.EPOCH] for r in records} == {item.epoch}
    assert {r[SinkField.WORKER_ID] for r in records} == {worker.worker_id}
    assert all(r[SinkField.PAYLOAD]["seq"] == r[SinkField.SEQ] for r in records)
    assert all(r[SinkField.RECEIVED_AT_MS] > 0 for r in records)
    # The checkpoint (on the session's renewals) follows what the sink acknowledged, never ahead.
    fleet.wait(lambda: streams.checkpoint(stream_id) >= 20, 5, "checkpoint advanced")
    assert streams.checkpoint(stream_id) <= max(fleet.seqs(stream_id))


def test_a_feed_that_starts_at_seq_0_delivers_it_and_a_takeover_after_it_resumes_at_1(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """A new stream has delivered nothing, not "up to 0": it asks for seq 0 and its first
    record is seq 0. Its holder killed after delivering exactly seq 0, the survivor takes it
    over from the session's vector and asks for seq 1: 0 is not repeated, 1 not skipped."""
    victim = fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id, first_seq=0, until_seq=0))
    fleet.wait_seq(stream_id, 0)
    fleet.wait(lambda: streams.checkpoint(stream_id) == 0, 5, "seq 0 checkpointed")
    assert fleet.seqs(stream_id) == [0]
    assert upstream.stats(stream_id).from_seqs == [0]

    survivor = fleet.start()
    victim.kill()
    fleet.wait(lambda: streams.read(stream_id).owner == survivor.worker_id, 20, "taken over")
    fleet.wait(lambda: len(upstream.stats(stream_id).from_seqs) == 2, 10, "reconnected")
    assert upstream.stats(stream_id).from_seqs == [0, 1]
    assert streams.read(stream_id).last_seq == 0
    assert fleet.seqs(stream_id) == [0]


def test_stop_closes_the_upstream_within_a_heartbeat_and_releases(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    measured: Callable[[str, float, str], None],
) -> None:
    """desired_state STOPPED reaches the owner (within a heartbeat, its poll of its own streams:
    measured; a generous cap asserted): it closes the upstream (1000), writes the final
    checkpoint, releases, sends no handoff."""
    fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_seq(stream_id, 10)

    stopped_at = time.monotonic()
    streams.stop(stream_id)
    fleet.wait(lambda: upstream.stats(stream_id).open == 0, 30, "upstream closed")
    closed_after = time.monotonic() - stopped_at
    fleet.wait(lambda: streams.read(stream_id).owner is None, 30, "lease released")
    # The worker logs the release once DynamoDB answered it: the item may show it first.
    fleet.wait(
        lambda: "released" in [e.event for e in fleet.events(stream_id=stream_id)],
        30,
        "the release in the worker's lease events",
    )

    item = streams.read(stream_id)
    assert item.expires_at_ms == 0
    delivered = fleet.seqs(stream_id)
    assert item.last_seq == max(delivered), "final checkpoint = last delivered seq"
    assert_no_gap(delivered)
    # One heartbeat until the renewal that sees the stop, plus the time to act on it.
    measured("stop → upstream closed", closed_after / HEARTBEAT_SECONDS, "heartbeats")
    kinds = [e.event for e in fleet.events(stream_id=stream_id)]
    assert kinds[-2:] == ["stopped", "released"]
    assert "handoff" not in kinds
    time.sleep(0.5)  # and it stays stopped: nobody re-acquires a STOPPED stream
    assert streams.read(stream_id).owner is None


def test_worker_item_is_published_while_running_and_revoked_on_exit(
    fleet: Fleet, settings: Settings
) -> None:
    """The worker item (its session) names the worker, its state, capacity, host and pid and
    its hb counts renewals while it runs; a graceful exit (status 0) leaves it a tombstone, so
    a renewal still on its way can never bring it back."""
    worker = fleet.start(capacity=7, task_arn="arn:aws:ecs:us-east-1:000000000000:task/c/abc")
    sessions = SessionStore(aws.client("dynamodb", settings), settings.table_name)

    def mine() -> WorkerInfo | None:
        return next((w for w in sessions.list_fleet() if w.worker_id == worker.worker_id), None)

    info = fleet.wait(mine, 20, "worker item published")
    assert info.state is WorkerState.RUNNING
    assert info.capacity == 7
    assert info.pid == worker.pid
    assert info.task_arn.endswith("task/c/abc")
    fleet.wait(lambda: (mine() or info).hb >= 3, 10, "the session renewed")
    assert worker.terminate(20) == 0
    gone = mine()
    assert gone is not None and gone.state is WorkerState.EXPIRED


def test_health_check_follows_the_event_loop(fleet: Fleet, settings: Settings) -> None:
    """``python -m worker.health`` passes while the worker's loop touches the file, and fails
    once the worker is gone and the file has aged past the limit."""
    worker = fleet.start(health_max_age_seconds=1.0)
    health_file = worker.settings.health_file
    fleet.wait(lambda: os.path.exists(health_file), 20, "health file written")
    env = {**os.environ, **worker.settings.to_env()}

    def check() -> int:
        return subprocess.run(
            [sys.executable, "-m", "worker.health"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            check=False,
        ).returncode

    assert check() == 0
    assert worker.terminate(20) == 0
    fleet.wait(lambda: time.time() - os.stat(health_file).st_mtime > 1.5, 5, "health file aged")
    assert check() == 1


def test_a_second_signal_still_releases_and_exits_cleanly(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """SIGTERM then SIGINT right after: the worker skips draining its queues but still
    releases every lease (with the last acknowledged checkpoint) and exits 0."""
    worker = fleet.start()
    ids = new_ids(2)
    for stream_id in ids:
        streams.put(stream_id, upstream.url_for(stream_id))
    for stream_id in ids:
        fleet.wait_seq(stream_id, 5)
    worker.signal(signal.SIGTERM)
    worker.signal(signal.SIGINT)
    assert worker.wait(20) == 0
    for stream_id in ids:
        item = streams.read(stream_id)
        assert item.owner is None
        assert item.last_seq <= max(fleet.seqs(stream_id))
