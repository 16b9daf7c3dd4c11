"""A worker that cannot prove itself alive, and streams whose owner is gone: real worker
processes against the moto server.

- A worker none of whose renewals is answered for several leases says so to the container
  health check and exits, so that ECS replaces it (and the reaper frees what it held).
- A stream attached to a session whose item no longer exists is freed and taken by a worker of
  either liveness mode, instead of staying held by nobody alive for good.
- Free streams a session fleet left in its shards of the orphan index, with no command on the
  way, are taken by a per-stream fleet (which writes one shard) all the same.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from worker_helpers import (
    LEASE_SECONDS,
    START_TIMEOUT,
    Fleet,
    Streams,
    assert_no_gap,
    new_ids,
)

from local.moto_process import hold_dynamodb_writes, stop_holding_writes
from local.upstream_sim import UpstreamSimulator
from local.worker_process import REPO_ROOT, WorkerProcess, child_env
from streamlease import rules
from streamlease.indexes import expiry_shard
from streamlease.schema import Liveness, belongs_to_task, worker_key
from streamlease.settings import Settings
from worker.liveness.session_keeper import EXIT_UNREACHABLE

pytestmark = [pytest.mark.slow, pytest.mark.serial]

MODES = pytest.mark.parametrize(
    "liveness", [Liveness.SESSION, Liveness.STREAM], ids=["sessions", "per-stream"]
)


def health_check(worker: WorkerProcess) -> subprocess.CompletedProcess[str]:
    """``python -m worker.health`` as the container runs it, with ``worker``'s settings."""
    return subprocess.run(
        [sys.executable, "-m", "worker.health"],
        cwd=REPO_ROOT,
        env=child_env(worker.settings),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@MODES
def test_a_worker_whose_renewals_go_unanswered_reports_unhealthy_and_exits(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    settings: Settings,
    liveness: Liveness,
) -> None:
    """Every renewal of the worker's session lands, but only after its client gave up: after
    four leases without an answered renewal the container health check fails, saying why,
    and the worker exits with its own status (sessions are replaced meanwhile, to no avail).
    Its metrics show the silence growing past a lease on the way."""
    worker = fleet.start(liveness=liveness)
    stream_id = new_ids(1)[0]
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_owned([stream_id])
    assert health_check(worker).returncode == 0
    endpoint = settings.aws_endpoint_url
    late = 2 * settings.dynamodb_timeout_seconds
    hold_dynamodb_writes(
        endpoint, ["UpdateItem", worker_key(worker.worker_id), "#hb + :one"], late, count=100_000
    )
    try:
        fleet.wait(
            lambda: not worker.alive,
            rules.UNREACHABLE_LEASES * LEASE_SECONDS + START_TIMEOUT,
            "the worker gave up",
        )
    finally:
        stop_holding_writes(endpoint)
    assert worker.process.returncode == EXIT_UNREACHABLE, worker.log_tail(20)
    check = health_check(worker)
    assert check.returncode == 1
    assert "no session renewal answered" in check.stderr
    answer_ages = [
        r["renewal_answer_age_ms_max"]
        for r in fleet.log_records(worker)
        if r.get("message") == "metrics flushed"
    ]
    assert max(answer_ages) > 2 * LEASE_SECONDS * 1000, answer_ages


@MODES
def test_a_stream_held_by_a_session_that_is_gone_is_freed_and_taken(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    liveness: Liveness,
    measured: Callable[[str, float, str], None],
) -> None:
    """A stream attached to a session whose item is gone (deleted while the stream hung on it)
    is freed and taken once a worker runs (about two leases later: measured), in either mode,
    resuming after its checkpoint."""
    stream_id = new_ids(1)[0]
    streams.put_held(
        stream_id, upstream.url_for(stream_id), session="gone/1-dead", epoch=3, last_seq=5
    )
    worker = fleet.start(liveness=liveness)
    health = Path(worker.settings.health_file)
    fleet.wait(health.exists, START_TIMEOUT, "the worker running")
    running = time.monotonic()
    fleet.wait_owned([stream_id], START_TIMEOUT)
    waited = time.monotonic() - running
    measured("a gone session's stream taken after the worker ran", waited / LEASE_SECONDS, "leases")
    stream = streams.read(stream_id)
    assert stream.epoch == 4
    assert stream.owner is not None and belongs_to_task(stream.owner, worker.worker_id)
    fleet.wait_seq(stream_id, 10)
    assert_no_gap(fleet.seqs(stream_id), first=6)


def test_free_streams_a_session_fleet_left_in_its_shards_are_taken_by_a_per_stream_worker(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """Freed by a session fleet's drain into its shards of the orphan index, their handoff
    commands gone (received by a worker that stopped before it put them back): a per-stream
    worker, which writes and queries one shard, owns every one anyway and delivers from the
    start."""
    ids = [
        s
        for s in new_ids(60)
        if expiry_shard(s, Liveness.SESSION) != expiry_shard(s, Liveness.STREAM)
    ][:6]
    for stream_id in ids:
        streams.put(
            stream_id,
            upstream.url_for(stream_id),
            command=False,
            shard=expiry_shard(stream_id, Liveness.SESSION),
        )
    worker = fleet.start(liveness=Liveness.STREAM)
    fleet.wait_owned(ids, START_TIMEOUT)
    for stream_id in ids:
        owner = streams.read(stream_id).owner
        assert owner is not None and belongs_to_task(owner, worker.worker_id)
    for stream_id in ids:
        fleet.wait_seq(stream_id, 5)
        assert_no_gap(fleet.seqs(stream_id))
