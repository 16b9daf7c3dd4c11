"""Chaos: the world around the workers fails. DynamoDB gone for longer than a lease, upstreams
that keep dropping, and streams started and stopped through the API while workers die."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import pytest
from chaos_support import (
    LEASE_SECONDS,
    STREAMS,
    assert_invariants,
    finish,
    recovery_timeout,
    start_fleet,
)

from local.moto_process import set_dynamodb_down
from local.testbed import Testbed
from local.upstream_sim import ALL_STREAMS
from streamlease.lease_events import TERMINAL_KINDS, LeaseEvent, LeaseEventKind
from streamlease.schema import Liveness

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

LAPSED = frozenset({LeaseEventKind.FENCED, LeaseEventKind.LOST})
"""How a holding ends without releasing: its id may stay on the item."""


def test_dynamodb_unreachable_for_longer_than_a_lease(bed: Testbed) -> None:
    """Every holder fences itself before its lease can lapse (per-stream: each holding open when
    the outage began ends fenced, unless it had been handed over just before — the load
    rebalancer may still be moving streams; sessions: every stream pauses); after the outage the
    streams are owned again and resume from their checkpoints: no overlap, no gap."""
    ids = start_fleet(bed)
    endpoint = bed.settings.aws_endpoint_url
    outage_began = time.monotonic()
    set_dynamodb_down(endpoint, True)
    try:
        bed.wait_for(lambda: not bed.owners(), 3 * LEASE_SECONDS + 10, "every holder fenced itself")
        time.sleep(LEASE_SECONDS / 2)
    finally:
        set_dynamodb_down(endpoint, False)
    bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    report = finish(bed)
    assert_invariants(bed, report)
    if bed.settings.liveness is Liveness.STREAM:
        endings = holdings_open_at(bed.tail.events, outage_began)
        assert endings, "no holding was open when the outage began"
        unfenced = {
            holding: ending
            for holding, ending in endings.items()
            if ending is None
            or not (
                ending.event == "fenced"
                # handed over just before: its release was sent before the outage began
                or (ending.event == "released" and (ending.deadline_mono or 0.0) <= outage_began)
            )
        }
        assert not unfenced, f"holdings that did not fence in the outage: {unfenced}"


def holdings_open_at(
    events: Sequence[LeaseEvent], moment: float
) -> dict[tuple[str, int], LeaseEvent | None]:
    """The holdings (stream, epoch) acquired before ``moment`` and not ended before it, each
    with the event that ended it (None: it never ended)."""
    acquired = {(e.stream_id, e.epoch) for e in events if e.event == "acquired" and e.mono < moment}
    endings: dict[tuple[str, int], LeaseEvent | None] = dict.fromkeys(acquired)
    for e in events:
        holding = (e.stream_id, e.epoch)
        if holding in endings and endings[holding] is None and e.event in TERMINAL_KINDS:
            endings[holding] = e
    return {h: e for h, e in endings.items() if e is None or e.mono >= moment}


def test_upstream_flapping_repeats_and_loses_nothing(bed: Testbed) -> None:
    """Every upstream connection drops after a few messages for several seconds (TCP aborts and
    1012 closes alternating); the holder reconnects from its last seq + 1 each time."""
    ids = start_fleet(bed)
    before = sum(bed.upstream.stats(s).accepted for s in ids)
    for round_number in range(4):
        if round_number % 2 == 0:
            bed.upstream.set_fault(ALL_STREAMS, drop_after=3)
        else:
            bed.upstream.set_fault(ALL_STREAMS, close_code=1012, close_after=2)
        for stream_id in ids:  # faults apply to new connections: make every stream reconnect
            bed.upstream.disconnect(stream_id, close_code=None if round_number % 2 == 0 else 1012)
        time.sleep(1.5)
    bed.upstream.clear_faults()
    reconnects = sum(bed.upstream.stats(s).accepted for s in ids) - before
    assert reconnects >= 2 * len(ids), f"the upstream did not flap ({reconnects} reconnects)"
    bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    time.sleep(1.0)
    report = finish(bed)
    assert_invariants(bed, report, duplicates_allowed_after=())
    assert report.duplicates == 0


def test_start_stop_churn_through_the_api_while_workers_die(bed: Testbed) -> None:
    """Streams are stopped, restarted and created through the API while two workers are
    killed: stopped streams end unowned, every wanted stream ends owned, and no invariant
    breaks across the whole mess."""
    ids = start_fleet(bed)
    rng = random.Random(11)
    running, stopped = list(ids), []
    kills_at = {6, 14}
    for step in range(20):
        if step in kills_at:
            victim = rng.choice(bed.live_workers())
            victim.kill()
            bed.reap(victim)  # what ECS's task-stopped event does; frees stopped streams too
            bed.add_worker()
        action = rng.random()
        if action < 0.4 and len(running) > STREAMS // 2:
            stream = running.pop(rng.randrange(len(running)))
            bed.stop_stream(stream)
            stopped.append(stream)
        elif action < 0.75 and stopped:
            stream = stopped.pop(rng.randrange(len(stopped)))
            bed.start_stream(stream)
            running.append(stream)
        else:
            running += bed.create_streams(1, prefix="n")
        time.sleep(0.3)
    bed.wait_all_owned(running, recovery_timeout(bed.settings))
    bed.wait_none_owned(stopped, recovery_timeout(bed.settings))
    assert_stopped_streams_unowned(bed, stopped)
    report = finish(bed)
    assert_invariants(bed, report)


def assert_stopped_streams_unowned(bed: Testbed, stopped: Sequence[str]) -> None:
    """The API shows no owner on a stopped stream, with one exception: a per-stream holding
    that was fenced or lost before the stop reached it (renewals late on a loaded machine)
    leaves its id on the item, the last owner of a lease that lapsed, held by nobody. A
    session's stream has no such exception: an owner left on it would refuse its delete."""
    bed.tail.refresh()
    lapsed = {(e.stream_id, e.epoch) for e in bed.tail.events if e.event in LAPSED}
    per_stream = bed.settings.liveness is Liveness.STREAM
    for stream_id in stopped:
        view = bed.api.get_stream(stream_id)
        if view.get("owner") is None:
            continue
        assert per_stream and view["lease_state"] != "held", view
        assert (stream_id, view["epoch"]) in lapsed, view
