"""Outages around the worker: DynamoDB unreachable, upstreams that drop, refuse or forbid.

The worker must fence itself by its own timer when it cannot renew, come back when DynamoDB
does, never let two owners overlap, and treat upstream trouble with backoff and ``last_error``.
"""

from __future__ import annotations

import time

import pytest
from worker_helpers import (
    LEASE_SECONDS,
    Fleet,
    Streams,
    assert_no_gap,
    new_ids,
)

from local.invariants import format_report
from local.moto_process import set_dynamodb_fault
from local.upstream_sim import UpstreamSimulator
from streamlease.schema import Liveness
from streamlease.settings import Settings
from streamlease.sink_fields import SinkField

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.alone]


def test_dynamodb_outage_longer_than_a_lease_fences_then_recovers(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, settings: Settings
) -> None:
    """Per-stream leases: with DynamoDB down for longer than a lease, the worker stops delivering
    every stream by its fencing deadline (nothing under the old epoch afterwards), and once
    DynamoDB is back the streams are owned again, resumed without a gap, never by two holders
    at once."""
    worker = fleet.start(liveness=Liveness.STREAM)
    ids = new_ids(2)
    for stream_id in ids:
        streams.put(stream_id, upstream.url_for(stream_id))
    for stream_id in ids:
        fleet.wait_seq(stream_id, 10)
    epochs = {s: streams.read(s).epoch for s in ids}

    set_dynamodb_fault(settings.aws_endpoint_url, "down")
    try:
        fleet.wait(
            lambda: {e.stream_id for e in fleet.events("fenced")} >= set(ids),
            5 * LEASE_SECONDS,
            "every stream fenced",
        )
        delivered_at_fence = {s: len(fleet.records(s)) for s in ids}
        time.sleep(LEASE_SECONDS)  # still down: nothing may be delivered meanwhile
        assert {s: len(fleet.records(s)) for s in ids} == delivered_at_fence
    finally:
        set_dynamodb_fault(settings.aws_endpoint_url, "up")

    for stream_id in ids:
        fleet.wait(
            lambda s=stream_id: streams.read(s).epoch > epochs[s], 15, f"{stream_id} owned again"
        )
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 10)
    for stream_id in ids:
        late = fleet.records(stream_id)[delivered_at_fence[stream_id] :]
        assert all(r[SinkField.EPOCH] > epochs[stream_id] for r in late), "stale epoch delivered"
        assert_no_gap(fleet.seqs(stream_id))
    report = fleet.report()
    assert report.ok, format_report(report)
    assert worker.alive


def test_dynamodb_outage_longer_than_a_lease_pauses_a_session_then_resumes_it(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, settings: Settings
) -> None:
    """Sessions: with DynamoDB down for longer than a lease, every stream stops delivering at the
    session's deadline; nobody could take anything (no peer, and a tombstone needs DynamoDB), so
    when DynamoDB is back the session's next renewal succeeds and delivery resumes under the
    same epochs, exactly where it paused: no gap, no repeat, never outside the deadline."""
    worker = fleet.start()
    ids = new_ids(2)
    for stream_id in ids:
        streams.put(stream_id, upstream.url_for(stream_id))
    for stream_id in ids:
        fleet.wait_seq(stream_id, 10)
    epochs = {s: streams.read(s).epoch for s in ids}

    set_dynamodb_fault(settings.aws_endpoint_url, "down")
    try:
        fleet.wait(lambda: not fleet.owners(), 5 * LEASE_SECONDS, "every stream fenced")
        delivered_at_fence = {s: len(fleet.records(s)) for s in ids}
        time.sleep(LEASE_SECONDS)  # still down: nothing may be delivered meanwhile
        assert {s: len(fleet.records(s)) for s in ids} == delivered_at_fence
    finally:
        set_dynamodb_fault(settings.aws_endpoint_url, "up")

    for stream_id in ids:
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 10)
        records = fleet.records(stream_id)
        assert {r[SinkField.EPOCH] for r in records} == {epochs[stream_id]}
        seqs = fleet.seqs(stream_id)
        assert seqs == list(range(1, len(seqs) + 1)), "resumed exactly where it paused"
    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.duplicates == 0
    assert not fleet.events("lost"), "the session was never lost"
    assert worker.alive


def test_upstream_that_drops_is_retried_with_backoff_and_recorded(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """An upstream that aborts every connection after a few messages is reconnected with
    backoff (not in a tight loop), resumed without a gap, and its failure is in last_error."""
    fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id, drop_after=5))
    fleet.wait_seq(stream_id, 25)
    fleet.wait(lambda: streams.read(stream_id).last_error, 5, "last_error recorded")

    assert_no_gap(fleet.seqs(stream_id))
    assert "without a close frame" in (streams.read(stream_id).last_error or "")
    stats = upstream.stats(stream_id)
    span = stats.attempt_times[-1] - stats.attempt_times[0]
    # A tight loop would reconnect hundreds of times a second; with backoff and 5 messages per
    # connection at 20/s there are only a few attempts per second.
    assert stats.attempts / max(span, 0.5) < 10
    assert stats.from_seqs == sorted(stats.from_seqs), "every reconnect resumes further on"


def test_upstream_refusing_for_a_while_is_retried_until_it_accepts(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """HTTP 503 at the handshake is transient: retried with backoff, recorded in last_error,
    and the stream delivers from seq 1 once the upstream accepts."""
    fleet.start()
    (stream_id,) = new_ids(1)
    upstream.set_fault(stream_id, times=3, reject=503)
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_seq(stream_id, 10)

    assert upstream.stats(stream_id).rejected == 3
    assert "503" in (streams.read(stream_id).last_error or "")
    assert_no_gap(fleet.seqs(stream_id))


def test_upstream_403_is_fatal_parked_and_visible_in_last_error(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """HTTP 403 at the handshake is fatal: the owner keeps the lease (the fleet does not pass
    the stream around), parks it with last_error saying 403, and knocks again only rarely."""
    worker = fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id, reject=403))
    fleet.wait(
        lambda: "403" in (streams.read(stream_id).last_error or ""), 20, "last_error says 403"
    )
    first = upstream.stats(stream_id).attempts
    time.sleep(2.0)

    item = streams.read(stream_id)
    assert item.owner == worker.worker_id
    assert item.epoch == 1, "the stream was not passed around"
    retries = upstream.stats(stream_id).attempts - first
    # Parked: one attempt per backoff_max_seconds (0.5 s here), not a tight loop.
    assert retries <= 2.0 / worker.settings.backoff_max_seconds + 2
    assert fleet.records(stream_id) == []
