"""Placement by load and by counts (architecture §10): the pure rules the worker and the fleet
model share."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlease import placement
from streamlease.placement import DecayedRate, FleetLoad


def test_a_decayed_rate_is_right_from_the_first_seconds() -> None:
    """Bias-corrected: 10 events a second for 3 s read as 10/s, not a fraction of it."""
    rate = DecayedRate(30.0, since=100.0)
    for t in range(1, 4):
        rate.add(10, 100.0 + t)
    assert rate.rate(103.0) == pytest.approx(10.0, rel=0.2)


def test_a_decayed_rate_forgets_a_stream_that_went_quiet() -> None:
    rate = DecayedRate(10.0, since=0.0)
    for t in range(1, 61):
        rate.add(5, float(t))
    assert rate.rate(60.0) == pytest.approx(5.0, rel=0.1)
    assert rate.rate(100.0) < 5.0 / 8, "four half-lives later, below an eighth"


def test_a_rate_seeded_from_a_handoff_starts_there() -> None:
    rate = DecayedRate(30.0, since=0.0, initial=40.0)
    assert rate.rate(0.0) == pytest.approx(40.0)


def test_load_counts_messages_and_kibibytes() -> None:
    assert placement.stream_load(100.0, 2048.0) == pytest.approx(102.0)


def test_without_every_workers_load_counts_decide() -> None:
    assert placement.fleet_load([5.0, None, 3.0]) is None
    assert placement.fleet_load([0.0, 0.2, 0.1]) is None, "an idle fleet says nothing"
    assert placement.fleet_load([]) is None


def test_the_fleets_load_is_its_mean_the_room_below_and_the_surplus_above() -> None:
    fleet = placement.fleet_load([100.0, 10.0, 10.0])
    assert fleet == FleetLoad(mean=40.0, room=60.0, surplus=60.0)


def test_a_worker_within_the_slack_sheds_nothing() -> None:
    fleet = FleetLoad(mean=100.0, room=50.0, surplus=50.0)
    assert placement.choose_by_load([("a", 5.0)], 109.0, fleet, max_moves=10) == []


def test_the_heaviest_streams_that_fit_the_gap_go_first() -> None:
    """A gap of 60 closes with the 50 and the 10, not six streams of 10; the 100 stays, it
    would only move the imbalance."""
    streams = [("huge", 100.0), ("big", 50.0)] + [(f"s{i}", 10.0) for i in range(6)]
    fleet = FleetLoad(mean=140.0, room=60.0, surplus=60.0)
    assert placement.choose_by_load(streams, 200.0, fleet, max_moves=10) == ["big", "s0"]


def test_a_heavy_stream_that_misses_the_gap_by_less_than_the_slack_moves_first() -> None:
    """Two heavy streams (42) and light ones on a giver whose gap reads 38 on figures a few
    seconds old: one heavy stream goes (its receiver lands within the mean + slack), not the
    light ones that would leave both heavy streams where they are."""
    streams = [("h1", 42.0), ("h2", 42.0)] + [(f"l{i}", 1.0) for i in range(4)]
    fleet = FleetLoad(mean=40.0, room=38.0, surplus=48.0)
    assert placement.choose_by_load(streams, 88.0, fleet, max_moves=10) == ["h1"]


def test_a_giver_fills_only_its_part_of_the_receivers_room() -> None:
    """Two givers with equal surplus each fill half the room: together once, not twice."""
    streams = [(f"s{i}", 1.0) for i in range(100)]
    fleet = FleetLoad(mean=100.0, room=40.0, surplus=80.0)
    assert len(placement.choose_by_load(streams, 140.0, fleet, max_moves=100)) == 20


def test_a_round_moves_at_most_its_cap() -> None:
    streams = [(f"s{i}", 1.0) for i in range(100)]
    fleet = FleetLoad(mean=10.0, room=1000.0, surplus=90.0)
    assert len(placement.choose_by_load(streams, 100.0, fleet, max_moves=7)) == 7


def test_a_receiver_takes_only_below_the_mean_and_within_the_slack() -> None:
    fleet = FleetLoad(mean=100.0, room=50.0, surplus=50.0)
    assert placement.takes_by_load(80.0, fleet, stream=20.0)
    assert not placement.takes_by_load(100.0, fleet), "at the mark: passed on"
    assert not placement.takes_by_load(95.0, fleet, stream=30.0), "would land above the slack"


def test_a_free_stream_goes_to_the_worker_with_most_spare_load_ties_to_fewest_streams() -> None:
    assert placement.most_spare([("a", 50.0, 3), ("b", 20.0, 9), ("c", 20.0, 4)]) == "c"
    assert placement.most_spare([]) is None


@pytest.mark.parametrize(
    ("held", "share", "room", "surplus", "cap", "shed"),
    [
        (5, 5, 100, 0, 50, 0),  # at share
        (6, 5, 100, 1, 50, 0),  # within slack
        (1000, 770, 2310, 2300, 400, 230),  # scale-out: the whole excess in one round
        (1000, 770, 2310, 2300, 100, 100),  # ... a round's cap permitting
        (1000, 770, 1155, 2300, 400, 116),  # half the room: half the excess (rounded up)
        (12, 9, 0, 3, 50, 0),  # nobody below the share: a move would only shift it
    ],
)
def test_count_shedding_moves_its_part_of_the_room_in_one_round(
    held, share, room, surplus, cap, shed
) -> None:
    assert placement.count_to_shed(held, share, 1, room, surplus, cap) == shed


@given(
    held=st.integers(0, 10_000),
    share=st.integers(0, 10_000),
    slack=st.integers(0, 100),
    room=st.integers(0, 10_000),
    others=st.integers(0, 10_000),
    cap=st.integers(1, 1000),
)
def test_count_shedding_never_drops_below_share_nor_exceeds_room_or_cap(
    held, share, slack, room, others, cap
) -> None:
    """A shedding worker ends at or above its share, moving at most a round's cap and never
    more than the others can take."""
    surplus = max(0, held - share) + others
    shed = placement.count_to_shed(held, share, slack, room, surplus, cap)
    assert 0 <= shed <= min(cap, room)
    if shed:
        assert held - shed >= share


@given(
    loads=st.lists(st.floats(0.0, 1000.0), min_size=2, max_size=20),
    streams=st.lists(st.floats(0.01, 200.0), max_size=50),
)
def test_a_load_move_never_takes_a_giver_below_the_mean_less_the_slack(loads, streams) -> None:
    """What a giver hands off is within its excess and the receivers' room, each + the slack
    (the last stream may overshoot the gap by that much, never the excess): it ends no lower
    than the mean."""
    my_load = sum(streams)
    fleet = placement.fleet_load([my_load, *loads])
    if fleet is None:
        return
    chosen = placement.choose_by_load(
        [(str(i), x) for i, x in enumerate(streams)], my_load, fleet, max_moves=1000
    )
    moved = sum(streams[int(i)] for i in chosen)
    assert moved <= max(0.0, my_load - fleet.mean) + 1e-9
    assert moved <= fleet.room + fleet.slack + 1e-9


def _settle(holdings: list[dict[str, float]], pick: Callable[[list[int]], int]) -> int:
    """Rounds of load rebalancing until no worker sheds: each giver (one at a time, as the
    pace spreads them) hands its chosen streams to a worker below the mean (``pick`` chooses
    which, as whichever worker's poller is first). Returns the rounds it took, or -1 when it
    had not settled after 200."""
    for rounds in range(200):
        loads = [sum(h.values()) for h in holdings]
        fleet = placement.fleet_load(loads)
        if fleet is None:
            return rounds
        moved = False
        for giver, held in enumerate(holdings):
            chosen = placement.choose_by_load(list(held.items()), loads[giver], fleet, 100)
            for stream_id in chosen:
                takers = [w for w, load in enumerate(loads) if load < fleet.mean and w != giver]
                if not takers:
                    break
                taker = pick(takers)
                load = held.pop(stream_id)
                holdings[taker][stream_id] = load
                loads[giver] -= load
                loads[taker] += load
                moved = True
        if not moved:
            return rounds
    return -1


def test_a_stream_heavier_than_the_givers_excess_does_not_cycle_between_workers() -> None:
    """Loads 50 / 60 / 49 (mean 53, slack 5.3): the 10 of the worker at 60 is more than its
    excess (7). Moved, it put its taker above mean + slack, which moved it on, for ever; it
    stays now, whichever worker below the mean would take it."""
    for first_taker in (0, 1):

        def pick(takers: list[int], first: int = first_taker) -> int:
            return takers[first % len(takers)]

        holdings = [{"a20": 20.0, "a30": 30.0}, {"b50": 50.0, "x10": 10.0}, {"c49": 49.0}]
        assert _settle(holdings, pick) >= 0


@given(
    workers=st.lists(
        st.lists(st.floats(0.1, 100.0), min_size=0, max_size=6), min_size=2, max_size=5
    ),
    rng=st.randoms(use_true_random=False),
)
def test_load_rebalancing_always_settles(workers, rng) -> None:
    """Whatever the loads and whichever worker below the mean takes each handed-off stream, the
    moves stop: each lowers the sum of the squared loads, so none can be undone by others."""
    holdings = [
        {f"{w}-{i}": load for i, load in enumerate(loads)} for w, loads in enumerate(workers)
    ]
    assert _settle(holdings, rng.choice) >= 0


def test_a_thousand_givers_together_stay_within_the_fleet_s_pace() -> None:
    """A scale-out of a thousand workers of capacity 2,000, each 200 streams above its share,
    on a table pre-warmed for 80,000 write units a second: per round the fleet's handoffs fit
    the quarter of them given to moves (6,400 a second, three writes each), each giver its even
    part (32), instead of its cap of 50 (50,000 moves a round, 150,000 writes)."""
    givers, excess, rebalance = 1000, 200, 5.0
    cap = placement.round_cap(2000, 2)
    budget = placement.fleet_moves_per_second(1024, 80_000)
    caps = [
        placement.paced_cap(cap, excess, givers * excess, rebalance, budget) for _ in range(givers)
    ]
    assert (cap, budget) == (50, 6400)
    assert sum(caps) / rebalance <= budget
    assert set(caps) == {32}


def test_the_pace_is_the_lower_of_the_table_s_and_the_orphan_shards() -> None:
    """Three table writes a move against a quarter of its write units; two orphan-index
    writes a move against 15 % of its shards' partitions."""
    assert placement.fleet_moves_per_second(1024, 4_000) == 320  # a new on-demand table
    assert placement.fleet_moves_per_second(1024, 40_000) == 3_200
    assert placement.fleet_moves_per_second(32, 80_000) == 2_400  # the shards bind
    assert placement.fleet_moves_per_second(1, 80_000) == 75  # a per-stream fleet's one shard


def test_a_small_fleet_is_never_paced_and_every_giver_moves_at_least_one() -> None:
    assert placement.paced_cap(5, 40, 80, 10.0, 320) == 5
    assert placement.paced_cap(5, 0, 80, 10.0, 320) == 5, "not a giver: unchanged"
    assert placement.paced_cap(5, 1, 10**9, 10.0, 75) == 1


def test_a_giver_starts_above_share_plus_slack_and_sheds_on_down_to_the_share() -> None:
    """Hysteresis: one stream over the share starts nothing (a recount a stream off moves
    nothing at rest); once started, a giver goes on to the share."""
    at_rest = placement.giver_slack(1, shedding=False)
    assert placement.count_to_shed(801, 800, at_rest, 5000, 5000, 100) == 0
    assert placement.count_to_shed(803, 800, at_rest, 5000, 5000, 100) == 3
    shedding = placement.giver_slack(1, shedding=True)
    assert placement.count_to_shed(801, 800, shedding, 5000, 5000, 100) == 1


def test_shedding_ends_only_after_rounds_in_a_row_that_moved_nothing() -> None:
    """A round that moved nothing, on a share the digest read a few streams high while
    streams moved, does not end it; enough of them in a row do; a move restarts the count."""
    idle: int | None = placement.shed_rounds_idle(None, moved=0)
    assert idle is None, "never started"
    idle = placement.shed_rounds_idle(None, moved=4)
    assert idle == 0
    for _ in range(placement.SHED_SETTLE_ROUNDS - 1):
        idle = placement.shed_rounds_idle(idle, moved=0)
        assert idle is not None
    assert placement.shed_rounds_idle(idle, moved=1) == 0
    assert placement.shed_rounds_idle(idle, moved=0) is None


def test_a_taker_takes_rebalance_handoffs_at_its_own_pace() -> None:
    """Takes are spaced 1 / TAKES_PER_SECOND apart, from now when the last was long ago."""
    gap = 1.0 / placement.TAKES_PER_SECOND
    wait, after = placement.take_delay(0.0, 100.0)
    assert (wait, after) == (0.0, 100.0 + gap)
    wait2, after2 = placement.take_delay(after, 100.0)
    assert wait2 == pytest.approx(gap) and after2 == pytest.approx(100.0 + 2 * gap)
