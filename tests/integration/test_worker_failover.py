"""Owners that die, leave or freeze: the fleet takes their streams over, never two at once.

Each test starts two real workers, lets them share a few streams, then does something to one of
them and checks the lease events and the sink records with the invariant checker.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from worker_helpers import (
    HEARTBEAT_SECONDS,
    LEASE_SECONDS,
    RATE,
    START_TIMEOUT,
    Fleet,
    Streams,
    new_ids,
)

from local.invariants import EXPIRED, format_report
from local.upstream_sim import UpstreamSimulator
from local.worker_process import WorkerProcess
from streamlease.session_store import SessionStore

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.alone]

STREAMS = 4
TAKEOVER_CAP_SECONDS = 30.0
"""How long a takeover may take before a test fails: a loaded machine's bound, not the design's
(about a lease: measured here and shown, bounded in ``make bench``'s failover section)."""


def two_workers_sharing(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, **overrides: Any
) -> tuple[WorkerProcess, WorkerProcess]:
    """Two workers (started with ``overrides``) that both hold some of ``STREAMS`` delivering
    streams; returns (the busier worker, the other). Streams are created once both workers are
    registered, so neither takes them all before the other is up."""
    first, second = fleet.start(**overrides), fleet.start(**overrides)
    sessions = SessionStore(streams.dynamodb, streams.settings.table_name)
    fleet.wait(
        lambda: (
            {first.worker_id, second.worker_id}
            <= {w.worker_id for w in sessions.list_fleet() if w.is_live}
        ),
        START_TIMEOUT,
        "both workers registered",
    )
    ids = new_ids(STREAMS)
    for stream_id in ids:
        streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_owned(ids)
    fleet.wait(
        lambda: fleet.held_by(first) and fleet.held_by(second), 10, "both workers hold streams"
    )
    for stream_id in ids:
        fleet.wait_seq(stream_id, 10)
    victim = first if len(fleet.held_by(first)) >= len(fleet.held_by(second)) else second
    other = second if victim is first else first
    return victim, other


def takeover_seconds(fleet: Fleet, stream_id: str, old: str, new: str, since: float) -> float:
    """Seconds from ``since`` to the first acquire of ``stream_id`` by ``new`` after ``old``."""
    acquired = [
        e.mono
        for e in fleet.events("acquired", stream_id)
        if e.worker_id == new and e.mono >= since
    ]
    assert acquired, f"{new} never acquired {stream_id}"
    return min(acquired) - since


def test_kill_9_owner_is_taken_over_by_the_survivor(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    measured: Callable[[str, float, str], None],
) -> None:
    """After ``kill -9`` of an owner its streams are acquired by the survivor (about one lease
    later: its session's ``hb`` stood still for a lease, then a takeover — not lease +
    reconcile; measured), resume at the checkpoint + 1 with no gap, and repeat at most what was
    delivered since the last checkpoint."""
    victim, survivor = two_workers_sharing(fleet, streams, upstream)
    held = fleet.held_by(victim)
    assert held
    killed_at = time.monotonic()
    victim.kill()
    fleet.wait(
        lambda: held <= set(fleet.held_by(survivor)), TAKEOVER_CAP_SECONDS, "survivor took over"
    )
    for stream_id in held:
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 5)

    delays = [
        takeover_seconds(fleet, s, victim.worker_id, survivor.worker_id, killed_at) for s in held
    ]
    # The session's hb stops moving at the kill; the survivor, re-reading the fleet every
    # fleet_recount_seconds, sees it unchanged for a lease and takes over at once.
    measured("kill -9 → taken over by the survivor, max", max(delays) / LEASE_SECONDS, "leases")
    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.missing == 0
    crashed = [t for t in report.takeovers if t.from_end_reason == EXPIRED]
    assert {t.from_worker for t in crashed} == {victim.worker_id}
    assert len(crashed) == len(held)
    for takeover in report.takeovers:
        if takeover in crashed:
            # Repeats come only from after the last checkpoint (a heartbeat, plus some slack).
            assert takeover.duplicates <= RATE * (2 * HEARTBEAT_SECONDS + 0.5)
        else:  # handoffs while the two workers balanced out repeat nothing
            assert takeover.duplicates == 0


def test_sigterm_hands_every_stream_off_with_no_repeat(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """SIGTERM: the worker drains — final checkpoint, release, handoff — and exits 0; every one
    of its streams streams again on the other worker about a second later, with no gap and not
    a single repeated message."""
    leaving, staying = two_workers_sharing(fleet, streams, upstream)
    held = fleet.held_by(leaving)
    assert held
    assert leaving.terminate(20) == 0
    fleet.wait(lambda: held <= set(fleet.held_by(staying)), 10, "streams handed off")
    for stream_id in held:
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 5)

    for stream_id in held:
        released = [e.mono for e in fleet.events("released", stream_id)]
        assert released, f"{stream_id} was not released"
        handoffs = fleet.events("handoff", stream_id)
        assert handoffs, f"{stream_id} was released without a handoff"
        delay = takeover_seconds(
            fleet, stream_id, leaving.worker_id, staying.worker_id, max(released)
        )
        assert delay < 2.5, f"{stream_id} idle {delay:.2f} s after its release"
    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.missing == 0
    assert report.duplicates == 0


SPOT_BUDGET_SECONDS = 10.0
"""A shrunk shutdown budget: ECS gives a Fargate Spot task two minutes between its SIGTERM and
its end, the worker drains in 100 s of them (``shutdown_budget_seconds``)."""


def test_a_spot_interruption_hands_every_stream_off_within_the_shutdown_budget(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """Fargate Spot's interruption is a SIGTERM two minutes ahead: the worker drains under its
    budget (exit 0; past the budget it would cancel what is left and exit 1), and every stream
    it held is released with a handoff and streams again on the other worker."""
    leaving, staying = two_workers_sharing(
        fleet, streams, upstream, shutdown_budget_seconds=SPOT_BUDGET_SECONDS
    )
    held = fleet.held_by(leaving)
    assert held
    assert leaving.terminate(SPOT_BUDGET_SECONDS + TAKEOVER_CAP_SECONDS) == 0
    fleet.wait(lambda: held <= set(fleet.held_by(staying)), TAKEOVER_CAP_SECONDS, "handed off")
    for stream_id in held:
        assert fleet.events("released", stream_id), f"{stream_id} was not released"
        assert fleet.events("handoff", stream_id), f"{stream_id} was released without a handoff"
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 5)
    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.duplicates == 0


def test_sigterm_handoffs_are_taken_at_once_not_left_to_reconciliation(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """A peer already at its fair share still takes a leaving worker's streams about a second
    after their release: it sees the DRAINING worker item at its next fleet recount
    (``fleet_recount_seconds``, production value) and polls for the handoff commands. Reconcile
    (30 s) and rebalancing (30 s) are too slow here to explain it."""
    slow = {
        "reconcile_seconds": 30.0,
        "rebalance_seconds": 30.0,
        "fleet_recount_seconds": 1.0,
    }
    leaving, staying = two_workers_sharing(fleet, streams, upstream, **slow)
    held = fleet.held_by(leaving)

    assert leaving.terminate(20) == 0
    fleet.wait(lambda: held <= set(fleet.held_by(staying)), 10, "streams handed off")
    for stream_id in held:
        released = max(e.mono for e in fleet.events("released", stream_id))
        delay = takeover_seconds(fleet, stream_id, leaving.worker_id, staying.worker_id, released)
        assert delay < 2.0, f"{stream_id} idle {delay:.2f} s after its release"
    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.duplicates == 0


def test_sigstop_past_the_lease_fences_itself_and_never_overlaps(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """A worker frozen (SIGSTOP) for longer than its lease loses its streams to the other; when
    it wakes (SIGCONT) it takes nothing more from its old upstreams: each of its holders ends
    fenced or lost, no two holders overlap, every record was received inside its lease.
    (A write frozen between the deadline check and the disk may still land on waking; it
    carries its old epoch, which consumers drop — the checker counts it as a late write.)"""
    frozen, other = two_workers_sharing(fleet, streams, upstream)
    held = fleet.held_by(frozen)
    assert held
    frozen.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    fleet.wait(lambda: held <= set(fleet.held_by(other)), 10, "streams taken over")
    time.sleep(max(0.0, frozen_at + 2.5 * LEASE_SECONDS - time.monotonic()))
    frozen.signal(signal.SIGCONT)

    def woke_and_gave_up() -> bool:
        ended = {
            e.stream_id
            for e in fleet.events()
            if e.worker_id == frozen.worker_id and e.event in ("fenced", "lost")
        }
        return held <= ended

    fleet.wait(woke_and_gave_up, 10, "the woken worker ended its old holdings")
    for stream_id in held:
        fleet.wait_seq(stream_id, max(fleet.seqs(stream_id)) + 5)
    report = fleet.report()
    assert report.ok, format_report(report)
    assert report.missing == 0
    assert all(s.records_outside_lease == 0 for s in report.streams.values())
    assert frozen.alive, "a worker that lost its leases keeps running (it can take new ones)"
