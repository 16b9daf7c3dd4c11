"""Capacity bookkeeping: reservations count, and handed-off streams are left alone a while."""

from __future__ import annotations

from worker.ownership.holdings import Holdings


def test_reservations_count_against_capacity() -> None:
    """Concurrent acquires reserve a place first, so they can never overshoot capacity."""
    holdings = Holdings(capacity=2, given_away_seconds=15.0)
    assert holdings.reserve("a")
    assert not holdings.reserve("a"), "one attempt per stream at a time"
    assert holdings.reserve("b")
    assert not holdings.reserve("c")
    assert (holdings.count, holdings.free, "a" in holdings) == (2, 0, True)
    holdings.cancel_reservation("a")
    assert (holdings.count, holdings.free, "a" in holdings) == (1, 1, False)


def test_a_stream_handed_off_is_left_to_others_for_the_window() -> None:
    holdings = Holdings(capacity=10, given_away_seconds=15.0)
    holdings.note_given_away("s", now_mono=100.0)
    assert holdings.given_away_recently("s", now_mono=114.9)
    assert not holdings.given_away_recently("s", now_mono=115.0)
    assert not holdings.given_away_recently("never", now_mono=100.0)


def test_the_memory_of_handoffs_stays_bounded() -> None:
    """Streams handed off long ago are forgotten, even if never asked about again."""
    holdings = Holdings(capacity=5, given_away_seconds=1.0)
    for i in range(1000):
        holdings.note_given_away(f"s{i}", now_mono=float(i))
    assert len(holdings._given_away) <= 2 * holdings.capacity + 1
    assert holdings.given_away_recently("s999", now_mono=999.5)
