"""Chaos through the Kinesis sink, judged where the data is read: real worker processes write
to the Kinesis stream of the session's moto server, and the consumer (:mod:`streamlease
.consumer`, through the same shard reader as ``streamlease consume``) reads it back.

One fleet lives through every kind of trouble in turn — a worker killed (``kill -9``), a new
worker the rebalancer sheds streams to, a worker drained (SIGTERM), a stream changed in place,
a gray failure (renewals that land but are never answered) and a sink slower than the drain
limit (every ``PutRecords`` held 12 s) — and another fleet through a reshard of the sink
stream; then the reader's view must be exact: every
stream's messages once each, in order, with no gap; what the raw stream repeated is counted by
the consumer, not passed on. Ownership is judged from the lease events as in every chaos run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from chaos_support import assert_invariants, recovery_timeout, start_fleet

from local.invariants import KinesisView, load_kinesis
from local.moto_process import (
    held_writes,
    hold_dynamodb_writes,
    hold_kinesis_puts,
    stop_holding_writes,
)
from local.testbed import Testbed
from local.worker_process import WorkerProcess, scaled_settings
from streamlease import aws
from streamlease.schema import belongs_to_task, worker_key
from streamlease.settings import Settings

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

LEASE_SECONDS: Final = 2.0
STREAMS: Final = 12
SLOW_SINK_SECONDS: Final = 12.0
"""How long each held ``PutRecords`` waits before it is stored: longer than a drain waits
(``DRAIN_SECONDS``, 10 s) and far longer than the sink's client does."""
GRAY_SECONDS: Final = 1.5
"""How late a gray worker's renewals land: past its DynamoDB timeout."""


@pytest.fixture
def kinesis_bed(aws_settings: Settings, tmp_path: Path) -> Iterator[Testbed]:
    """A testbed whose workers write to the Kinesis sink (aggregated) at a tenth of production's
    timers. The fence margin is 0.6 s (0.2 s scaled), so the sink's calls may take 0.3 s on a
    loaded machine running moto beside them."""
    settings = scaled_settings(
        aws_settings,
        lease_seconds=LEASE_SECONDS,
        capacity=2 * STREAMS,
        fence_margin_seconds=0.6,
        metrics_flush_seconds=600.0,
        dynamodb_timeout_seconds=1.0,
        shutdown_budget_seconds=30.0,
    )
    with Testbed(settings, tmp_path / "run", rate=5.0, sink="kinesis") as bed:
        yield bed


def exact(view: KinesisView) -> dict[str, str]:
    """What is wrong with each stream's emitted messages (empty: every seq once, in order, from
    the first)."""
    seqs: dict[str, list[int]] = {}
    for record in view.emitted:
        seqs.setdefault(record.stream_id, []).append(record.seq)
    wrong = {}
    for stream_id, got in seqs.items():
        if got != list(range(1, got[-1] + 1)):
            wrong[stream_id] = f"seqs {got[:5]}… ({len(got)}, last {got[-1]})"
    for stream_id, counts in view.counts.items():
        if counts.gaps:
            wrong[stream_id] = f"{counts.gaps} gaps"
    return wrong


def test_every_kind_of_trouble_leaves_the_reader_each_message_once_in_order(
    kinesis_bed: Testbed,
) -> None:
    """kill -9, a shed to a new worker, a SIGTERM drain, a change in place, a gray failure and
    a sink slower than the drain limit: the consumer's output has no repeat, no gap and keeps
    each stream's order, while the raw stream holds the repeats it removed."""
    bed = kinesis_bed
    ids = start_fleet(bed, workers=3, streams=STREAMS)
    timeout = recovery_timeout(bed.settings)
    endpoint = bed.settings.aws_endpoint_url

    def busiest() -> tuple[WorkerProcess, set[str]]:
        holdings = bed.holdings()
        worker = max(bed.live_workers(), key=lambda w: len(holdings.get(w.worker_id, ())))
        return worker, holdings.get(worker.worker_id, set())

    # kill -9: its streams are taken over from its vector's checkpoints (repeats in the raw).
    victim, held = busiest()
    time.sleep(LEASE_SECONDS)  # a heartbeat's worth delivered past the last checkpoint
    victim.kill()
    bed.wait_taken_over(held, victim.worker_id, timeout)
    # A new worker: the rebalancer sheds streams to it (graceful handoffs).
    newcomer = bed.add_worker()
    bed.wait_for(lambda: bool(bed.holdings().get(newcomer.worker_id)), timeout, "a shed stream")
    # SIGTERM: a drain.
    drained, held = busiest()
    assert drained.terminate(bed.settings.shutdown_budget_seconds + 10) == 0
    bed.wait_taken_over(held, drained.worker_id, timeout)
    bed.add_worker()
    # A change in place: the holder reconnects with the new URL from its checkpoint.
    changed = ids[0]
    bed.api.change_stream(changed, ws_url=bed.url_for(changed, note="changed"))
    # A gray failure: one worker's renewals land late, every answer lost.
    gray, held = busiest()
    hold_dynamodb_writes(
        endpoint, ["UpdateItem", worker_key(gray.worker_id), "#hb + :one"], GRAY_SECONDS, 100_000
    )
    try:
        bed.wait_for(
            lambda: all(
                not belongs_to_task(bed.owners().get(s, gray.worker_id), gray.worker_id)
                for s in held
            ),
            timeout,
            "the gray worker's streams moved",
        )
    finally:
        stop_holding_writes(endpoint)
    bed.wait_all_owned(ids, timeout)
    # A sink slower than the drain limit while a worker drains.
    hold_kinesis_puts(endpoint, SLOW_SINK_SECONDS, count=10_000)
    try:
        drained, held = busiest()
        drained.terminate(0)
        bed.wait_taken_over(held, drained.worker_id, timeout + SLOW_SINK_SECONDS)
    finally:
        stop_holding_writes(endpoint)
    bed.wait_all_owned(ids, timeout)
    bed.wait_for(
        lambda: held_writes(endpoint)["waiting"] == 0,
        2 * SLOW_SINK_SECONDS + timeout,
        "the held calls landed",
    )
    observation_end = time.monotonic()
    bed.stop_all_workers()

    view = load_kinesis(bed.settings)
    assert not view.problems, view.problems[:3]
    assert set(ids) <= {r.stream_id for r in view.emitted}
    assert exact(view) == {}
    repeats = sum(c.repeats + c.stale for c in view.counts.values())
    assert repeats > 0, "the raw stream repeated nothing: the kill proved nothing"
    assert len(view.raw) == len(view.emitted) + repeats
    # Ownership from the lease events, and the consumer's output inside its leases. A record
    # the consumer emits may have landed after a newer epoch acquired (nothing of that epoch
    # was read yet): that is the raw stream's business, so write times are not judged here.
    report = bed.report(
        records=view.emitted, observation_end=observation_end, write_tolerance_seconds=math.inf
    )
    assert_invariants(bed, report)
    print(
        f"consumer view: {len(view.emitted)} messages emitted of {len(view.raw)} stored, "
        f"{repeats} repeats and stale dropped"
    )


def test_a_reshard_of_the_sink_stream_leaves_the_reader_each_message_once_in_order(
    kinesis_bed: Testbed,
) -> None:
    """Every shard of the sink stream is split while the fleet writes: records packed for a
    parent land on a child (the sink sends what that child does not cover again), and the
    reader finishes each parent before its children. Each message once, in order, no gap."""
    bed = kinesis_bed
    ids = start_fleet(bed, workers=2, streams=STREAMS)
    kinesis = aws.client("kinesis", bed.settings)
    name = bed.settings.kinesis_stream_name
    time.sleep(LEASE_SECONDS)  # records in the parents first
    for shard in kinesis.list_shards(StreamName=name)["Shards"]:
        low = int(shard["HashKeyRange"]["StartingHashKey"])
        high = int(shard["HashKeyRange"]["EndingHashKey"])
        kinesis.split_shard(
            StreamName=name,
            ShardToSplit=shard["ShardId"],
            NewStartingHashKey=str((low + high) // 2),
        )
    time.sleep(2 * LEASE_SECONDS)  # the fleet writes on, into the children
    observation_end = time.monotonic()
    bed.stop_all_workers()

    view = load_kinesis(bed.settings)
    assert not view.problems, view.problems[:3]
    assert set(ids) <= {r.stream_id for r in view.emitted}
    assert exact(view) == {}
    children = {r.source for r in view.raw} - {
        s["ShardId"]
        for s in kinesis.list_shards(StreamName=name)["Shards"]
        if "ParentShardId" not in s
    }
    assert children, "nothing was written to a child shard: the split proved nothing"
    report = bed.report(
        records=view.emitted, observation_end=observation_end, write_tolerance_seconds=math.inf
    )
    assert_invariants(bed, report)
