"""How a worker decides how much to take and what to shed, from what it knows of the fleet."""

from __future__ import annotations

import random
import time

from streamlease.fleet_digest import FleetDigest
from streamlease.model import WorkerInfo
from streamlease.placement import FleetLoad
from streamlease.schema import WorkerState
from worker.ownership.commands import given_away_window_seconds, receive_count, wait_seconds
from worker.ownership.fleet_view import (
    FleetView,
    count_fleet,
    update_view,
    view_from_digest,
    wants_handoffs,
)
from worker.ownership.rebalancer import choose_to_shed, jittered
from worker.ownership.reconciler import query_limit, room_for


def info(
    worker_id: str, streams: int, state: WorkerState = WorkerState.RUNNING, capacity: int = 100
) -> WorkerInfo:
    return WorkerInfo(worker_id, state, 0, 0, streams, capacity, "host", 1)


def test_the_fleet_count_includes_draining_workers_streams_but_not_the_workers() -> None:
    """A draining worker's streams still need a home; the worker itself is not live."""
    workers = [info("me", 99), info("b", 5), info("c", 7, WorkerState.DRAINING)]
    total, live = count_fleet(workers, "me", held=3, orphans=2, dead=frozenset())
    assert (total, live) == (3 + 5 + 7 + 2, 2)


def test_a_session_judged_dead_is_not_a_live_worker_but_its_streams_still_count() -> None:
    """Its streams are about to be taken over: they are shared among the workers still alive."""
    workers = [info("me", 0), info("b", 6), info("dead", 6)]
    total, live = count_fleet(workers, "me", held=0, orphans=0, dead=frozenset({"dead"}))
    assert (total, live) == (12, 2)


def test_a_tombstone_with_nothing_attached_counts_for_nothing() -> None:
    workers = [info("me", 4), info("gone", 0, WorkerState.EXPIRED)]
    assert count_fleet(workers, "me", held=4, orphans=0, dead=frozenset()) == (4, 1)


def test_a_worker_alone_counts_itself() -> None:
    """No worker item readable (not even its own yet): the worker is the fleet."""
    view = FleetView(orphans=4)
    update_view(view, [], "me", held=2)
    assert (view.total_streams, view.live_workers, view.share) == (6, 1, 6)


def test_the_share_is_the_ceiling_of_streams_over_live_workers() -> None:
    view = FleetView()
    update_view(view, [info("me", 0), info("b", 5), info("c", 5)], "me", held=0)
    assert view.share == 4


def test_commands_are_received_up_to_the_room_under_share_and_capacity() -> None:
    """At most 10, at most the free capacity, at most what is missing to the share; at least 1."""
    assert receive_count(share=50, held=0, free=100) == 10
    assert receive_count(share=5, held=2, free=100) == 3
    assert receive_count(share=50, held=0, free=2) == 2
    assert receive_count(share=0, held=0, free=100) == 1


def test_sqs_wait_time_is_whole_seconds_up_to_twenty() -> None:
    assert [wait_seconds(s) for s in (0.0, 0.5, 1.0, 20.0, 60.0)] == [0, 1, 1, 20, 20]


def test_orphans_are_taken_up_to_the_share_or_a_proportional_part() -> None:
    """Below share: the room under it. At share with orphans about: a proportional part, so a
    stale share cannot strand them. Never beyond free capacity."""
    assert room_for(orphans=10, share=8, held=3, free=97, live_workers=3) == 5
    assert room_for(orphans=10, share=5, held=5, free=95, live_workers=3) == 4
    assert room_for(orphans=10, share=5, held=5, free=2, live_workers=3) == 2
    assert room_for(orphans=0, share=5, held=5, free=95, live_workers=3) == 0


def test_the_index_read_is_bounded() -> None:
    assert query_limit(100) == 250
    assert query_limit(10_000) == 1000


def test_only_streams_past_their_tenure_are_shed() -> None:
    """Shedding picks at random among streams held at least the minimum tenure."""
    candidates = [("young", 95.0), ("old1", 10.0), ("old2", 20.0)]
    chosen = choose_to_shed(candidates, 5, 100.0, 30.0, random.Random(1))
    assert sorted(chosen) == ["old1", "old2"]
    assert len(choose_to_shed(candidates, 1, 100.0, 30.0, random.Random(1))) == 1
    assert choose_to_shed(candidates, 0, 100.0, 30.0, random.Random(1)) == []


def test_timers_are_jittered_by_twenty_percent() -> None:
    assert jittered(10.0, 0.0) == 8.0
    assert 11.9 < jittered(10.0, 0.999) < 12.0


def test_a_handed_off_stream_is_left_to_others_for_three_reconcile_rounds() -> None:
    assert given_away_window_seconds(5.0) == 15.0


def test_the_deficit_is_what_running_workers_below_the_share_lack() -> None:
    """A new empty worker, two at the share, a draining one and a dead one: only the running,
    live workers below the share count, for what they lack to the share rounded down (26
    streams over 3: 8 2/3), up to which takers fill."""
    workers = [
        info("me", 12),
        info("new", 0),
        info("b", 9),
        info("d", 3, WorkerState.DRAINING),
        info("dead", 2),
    ]
    view = FleetView()
    update_view(view, workers, "me", held=12, dead=frozenset({"dead"}))
    assert (view.share, view.taking_share) == (9, 8)  # 26 streams over 3 live workers
    assert view.deficit == 8  # "me" holds 12: a giver lacks nothing


def test_a_worker_advertising_no_room_has_no_part_in_the_share() -> None:
    """A per-stream worker whose lease renewals go unanswered advertises a capacity of 0: the
    share and the deficit are counted over the workers that can hold streams (the 33 streams of
    a fleet of three, one of them gray, are shared by two), its streams still need a home."""
    workers = [info("me", 11), info("b", 11), info("gray", 11, capacity=0)]
    view = FleetView()
    update_view(view, workers, "me", held=11)
    assert (view.total_streams, view.live_workers, view.share) == (33, 2, 17)
    assert view.deficit == 10  # what me and b lack to 16; nothing is shed towards the gray one


def test_a_worker_s_lack_counts_up_to_its_capacity() -> None:
    """A peer configured for 5 streams lacks none at 5, whatever the share: the fleet does not
    wait for it to take more (workers at their share would stay out of the queue for it)."""
    workers = [info("me", 10), info("b", 10), info("small", 5, capacity=5)]
    view = FleetView()
    update_view(view, workers, "me", held=10, capacity=100)
    assert (view.share, view.taking_share, view.deficit) == (9, 8, 0)
    update_view(view, workers, "me", held=10, capacity=7)
    assert view.deficit == 0
    update_view(view, [*workers[:2], info("small", 5, capacity=8)], "me", held=10, capacity=100)
    assert view.deficit == 3


def test_every_peer_advertising_no_room_at_once_counts_them_all() -> None:
    """At least two running peers all without room: the store fails for the fleet, not for
    them; the share stays counted over everyone, so the first to recover does not take all. A
    single peer without room (a fleet of two, one of them gray) has no part in it."""
    workers = [info("me", 0), info("b", 0, capacity=0), info("c", 0, capacity=0)]
    assert count_fleet(workers, "me", held=0, orphans=30, dead=frozenset()) == (30, 3)
    alone = [info("me", 0), info("b", 0, capacity=0)]
    assert count_fleet(alone, "me", held=0, orphans=30, dead=frozenset()) == (30, 1)


def test_a_large_fleets_share_comes_from_the_digest_plus_the_orphans_seen() -> None:
    """The digest counts the streams held; each worker adds the orphans its scan estimates."""
    view = FleetView(orphans=40)
    digest = FleetDigest("writer", 0, sessions=12, live_workers=10, total_streams=960, deficit=7)
    view_from_digest(view, digest)
    assert (view.live_workers, view.total_streams, view.share, view.deficit) == (10, 1000, 100, 7)


def test_when_every_worker_holds_the_share_rounded_down_takers_fill_to_the_share() -> None:
    """Four workers, eleven streams, one holding five: the others at the share rounded down
    (2) take nothing more, yet the giver is above share + slack (3 + 1); then takers fill to the
    share and the deficit is counted to it, so the giver can shed down to it."""
    workers = [info("me", 5), info("b", 2), info("c", 2), info("d", 2)]
    view = FleetView()
    update_view(view, workers, "me", held=5)
    assert (view.share, view.taking_share, view.surplus) == (3, 2, 2)
    assert view.fill_to_share and view.deficit == 3
    assert wants_handoffs(view, 2, None) and not wants_handoffs(view, 3, None)
    settled = [info("me", 3), info("b", 3), info("c", 3), info("d", 2)]
    update_view(view, settled, "me", held=3)
    assert not view.fill_to_share and view.deficit == 0


def test_the_digest_writer_s_own_lack_is_in_the_deficit_it_publishes() -> None:
    """The writer of a large fleet's digest counts the fleet's deficit with its own: a writer
    that lost streams to a peer lacks them, and that peer, above share + slack, sheds them."""
    workers = [info("me", 16), info("w1", 24), *(info(f"w{n}", 20) for n in range(2, 20))]
    view = FleetView()
    update_view(view, workers, "me", held=16)
    assert (view.share, view.deficit, view.surplus) == (20, 4, 4)
    assert not view.fill_to_share


def test_after_a_death_nobody_holds_off_though_workers_lack_streams() -> None:
    """A dead worker's streams count into the share: every live worker lacks some and none is
    above share + slack, so the workers that reach the share rounded down first still poll for
    the rest; nor at rest, when one worker is within the slack above the share."""
    workers = [info("me", 10), info("b", 10), info("c", 8), info("dead", 10)]
    view = FleetView()
    update_view(view, workers, "me", held=10, dead=frozenset({"dead"}))
    assert (view.share, view.taking_share, view.deficit, view.surplus) == (13, 12, 8, 0)
    assert not view.holds_off(time.monotonic(), 5.0)
    within_slack = [info("me", 11), info("b", 10), info("c", 9)]
    update_view(view, within_slack, "me", held=11)
    assert (view.share, view.surplus, view.deficit) == (10, 0, 1)
    assert not view.holds_off(time.monotonic(), 5.0)
    scale_out = [info("me", 14), info("b", 14), info("c", 2)]
    update_view(view, scale_out, "me", held=14)
    assert (view.share, view.surplus, view.deficit) == (10, 8, 8)
    assert view.holds_off(time.monotonic(), 5.0)


def test_a_worker_holds_off_only_while_the_rebalance_makes_progress() -> None:
    """Progress is a new low of the deficit: a taker counted in it may be unable to take (on
    probation, behind on its renewals), and a deficit counted against a moving line, or
    refilled by churn, falls and rises again. Two rounds without a new low, and the workers
    that lack nothing poll again: new streams do not wait for the orphan scan."""
    view = FleetView()
    view.note_balance(10, 6, now=100.0)  # a giver above share + slack: a rebalance starts
    assert view.holds_off(100.0, 5.0) and view.holds_off(109.9, 5.0)
    assert not view.holds_off(110.0, 5.0)
    for now, deficit in ((104.0, 11), (106.0, 10), (108.0, 11), (109.0, 10)):
        view.note_balance(deficit, 6, now)  # up and down, never below 10: no progress
    assert not view.holds_off(110.0, 5.0)
    view.note_balance(8, 6, now=111.0)  # a taker took two
    assert view.holds_off(111.0, 5.0)
    view.note_balance(7, 0, now=112.0)  # the last givers, within the slack, shed on
    view.note_balance(6, 0, now=125.0)
    assert view.holds_off(125.0, 5.0)
    view.note_balance(5, 0, now=131.0)
    assert not view.holds_off(131.5, 5.0)  # four rounds since a giver was above share + slack
    view.note_balance(0, 0, now=113.0)
    assert not view.holds_off(113.0, 5.0)
    view.note_balance(4, 2, now=200.0)  # a new rebalance
    assert view.holds_off(200.0, 5.0)
    view.note_balance(4, 0, now=205.0)  # a taker that cannot take: its lack never clears,
    view.note_balance(4, 2, now=212.0)  # and a worker above share + slack again is no progress
    assert not view.holds_off(212.0, 5.0)
    view.recount(view.total_streams, view.live_workers + 1)  # but workers that join are
    view.note_balance(9, 5, now=213.0)
    assert view.holds_off(213.0, 5.0)
    view.load = FleetLoad(mean=10.0, room=5.0, surplus=1.0)
    assert not view.holds_off(200.0, 5.0)  # by load, takers are below the mean and poll
