"""The fleet shares the work: a joining worker gets its fair share, capacity is a hard limit."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from worker_helpers import (
    Fleet,
    Streams,
    new_ids,
)

from local.invariants import Report, format_report
from local.upstream_sim import UpstreamSimulator

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.alone]


def most_held_at_once(report: Report) -> dict[str, int]:
    """Per worker, the most streams it could deliver at the same moment (from the segments)."""
    edges: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for stream in report.streams.values():
        for seg in stream.segments:
            edges[seg.worker_id] += [(seg.start, 1), (seg.end, -1)]
    peak: dict[str, int] = {}
    for worker_id, points in edges.items():
        level = best = 0
        for _, step in sorted(points, key=lambda p: (p[0], p[1])):
            level += step
            best = max(best, level)
        peak[worker_id] = best
    return peak


def test_joining_worker_ends_with_its_fair_share_without_gaps(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """A worker holding six streams alone sheds down to its fair share (three) once a second
    worker joins; the handoffs are graceful: no gap and no repeated message."""
    first = fleet.start("a", rebalance_slack=0)
    ids = new_ids(6)
    for stream_id in ids:
        streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait(lambda: len(fleet.held_by(first)) == 6, 20, "the first worker holds all six")

    second = fleet.start("b", rebalance_slack=0)
    fleet.wait(
        lambda: len(fleet.held_by(first)) == 3 and len(fleet.held_by(second)) == 3,
        20,
        "three streams each",
    )
    for stream_id in ids:
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 5)

    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.missing == 0
    assert report.duplicates == 0
    assert {t.from_end_reason for t in report.takeovers} == {"released"}


def test_capacity_is_a_hard_limit_and_others_take_the_rest(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """A worker of capacity 2 never holds a third stream, however many are wanted; a second
    worker picks up the rest."""
    small = fleet.start("small", capacity=2)
    ids = new_ids(5)
    for stream_id in ids:
        streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait(lambda: len(fleet.held_by(small)) == 2, 20, "the small worker is full")
    time.sleep(1.5)  # three reconcile rounds with orphans in sight: it must not take more
    assert len(fleet.held_by(small)) == 2

    fleet.start("big", capacity=10)
    fleet.wait_owned(ids)
    report = fleet.report()
    assert report.ok, format_report(report)
    assert most_held_at_once(report)[small.worker_id] == 2


def test_a_joining_worker_takes_its_part_of_the_load_by_graceful_handoffs(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """Two heavy streams (40 msg/s) and four light ones (1 msg/s) on one worker: once a second
    worker joins, the first hands off by load (the rebalancer says so with the fleet's mean)
    until each holds one heavy stream. Every move is a graceful handoff: no stream delivered by
    two workers at once, no gap, no repeated message. A stream stays 4 s where it lands (30 s
    in production): its rate is measured before it can move."""
    first = fleet.start("a", min_tenure_seconds=4.0)
    heavy, light = new_ids(2, "heavy"), new_ids(4, "light")
    for stream_id in heavy:
        streams.put(stream_id, upstream.url_for(stream_id, rate=40))
    for stream_id in light:
        streams.put(stream_id, upstream.url_for(stream_id, rate=1))
    fleet.wait(lambda: len(fleet.held_by(first)) == 6, 20, "the first worker holds all six")

    second = fleet.start("b", min_tenure_seconds=4.0)

    def heavy_split() -> bool:
        return all(len(fleet.held_by(w) & set(heavy)) == 1 for w in (first, second))

    fleet.wait(heavy_split, 60, "one heavy stream on each worker")
    fleet.wait_owned([*heavy, *light])
    for stream_id in heavy:
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 40)

    shed = [r for r in fleet.log_records(first) if r.get("message") == "shedding streams"]
    assert shed and all(r.get("mean_load") is not None for r in shed), "moved by load"
    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.missing == 0
    assert report.duplicates == 0
    assert report.takeovers
    assert {t.from_end_reason for t in report.takeovers} == {"released"}
