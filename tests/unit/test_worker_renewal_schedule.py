"""The renewal timetable: one renewal per lease per heartbeat, spread evenly, phase kept."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlease.rules import retry_delay_seconds
from worker.ownership.renewal_schedule import RenewalSchedule

H = 5.0


def phases(schedule: RenewalSchedule[str], keys: list[str], now: float) -> list[float]:
    """Sorted phases (slot − now modulo the interval) of ``keys``."""
    return sorted((schedule.slot_of(k) - now) % H for k in keys)  # type: ignore[operator]


def widest_gap(sorted_phases: list[float]) -> float:
    """The widest gap between neighbours on the circle of one interval."""
    gaps = [b - a for a, b in itertools.pairwise(sorted_phases)]
    gaps.append(sorted_phases[0] + H - sorted_phases[-1])
    return max(gaps)


def test_a_lone_lease_is_due_one_heartbeat_after_it_was_acquired() -> None:
    """The first lease has nothing to avoid: it renews one full heartbeat later."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    assert schedule.add("a", now=100.0) == pytest.approx(105.0)


def test_new_leases_are_due_within_one_heartbeat() -> None:
    """However crowded the timetable, a new lease renews within one heartbeat of its acquire."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    for i in range(50):
        due = schedule.add(f"s{i}", now=10.0 + i * 0.01)
        assert 10.0 + i * 0.01 < due <= 10.0 + i * 0.01 + H


@settings(deadline=None, max_examples=50)  # O(n²) set-up; the machine may be busy
@given(st.integers(min_value=2, max_value=300))
def test_a_burst_of_acquires_is_spread_over_the_heartbeat(count: int) -> None:
    """Leases acquired at the same instant renew at distinct times, no gap wider than twice
    the even spacing (no bursts, ever after)."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    keys = [f"s{i}" for i in range(count)]
    for key in keys:
        schedule.add(key, now=0.0)
    spread = phases(schedule, keys, 0.0)
    assert len(set(spread)) == count
    assert widest_gap(spread) <= 2 * H / count + 1e-9


def test_due_leases_pop_once_in_due_order_and_stay_in_flight() -> None:
    """``pop_due`` returns what is due, earliest first, and not again until it is answered."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    schedule.add("a", now=0.0)  # due 5.0
    schedule.add("b", now=0.0)  # due 2.5
    assert schedule.pop_due(4.0) == [("b", pytest.approx(2.5))]
    assert schedule.pop_due(6.0) == [("a", pytest.approx(5.0))]
    assert schedule.pop_due(100.0) == []
    assert schedule.next_due() is None


def test_a_success_keeps_the_phase_and_skips_missed_slots() -> None:
    """After a renewal, the lease is due at its next slot; a late answer skips the slots that
    already passed instead of renewing in a catch-up burst."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    schedule.add("a", now=0.0)
    schedule.pop_due(5.0)
    assert schedule.succeeded("a", now=5.1) == pytest.approx(10.0)
    schedule.pop_due(10.0)
    assert schedule.succeeded("a", now=23.0) == pytest.approx(25.0)


def test_a_retry_comes_early_without_losing_the_slot() -> None:
    """An unanswered renewal is retried at the time asked; the next success returns to the
    lease's own slot, so a DynamoDB outage does not bunch the leases together."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    schedule.add("a", now=0.0)
    schedule.pop_due(5.0)
    schedule.retry("a", at=5.5)
    assert schedule.next_due() == pytest.approx(5.5)
    assert schedule.pop_due(5.5) == [("a", pytest.approx(5.5))]
    assert schedule.succeeded("a", now=5.6) == pytest.approx(10.0)


def test_removed_leases_are_never_due() -> None:
    """A removed lease disappears, even if it was due or in flight; answers for it are ignored."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    schedule.add("a", now=0.0)
    schedule.add("b", now=0.0)
    schedule.remove("a")
    assert [k for k, _ in schedule.pop_due(100.0)] == ["b"]
    schedule.remove("b")
    assert schedule.succeeded("b", now=101.0) is None
    schedule.retry("b", at=101.0)
    assert schedule.next_due() is None
    assert len(schedule) == 0


def test_the_retry_delay_is_a_jittered_quarter_heartbeat() -> None:
    """Retries come well inside the heartbeat, jittered so leases do not retry in lockstep."""
    low, high = retry_delay_seconds(4.0, 0.0), retry_delay_seconds(4.0, 0.999)
    assert 0.4 < low < high < 1.6
    assert retry_delay_seconds(0.01, 0.5) >= 0.05


def test_the_oldest_slot_says_how_far_renewals_are_behind() -> None:
    """A slot moves on only when its renewal succeeds: retries during an outage leave it where
    it was, so ``now - oldest_slot`` grows until DynamoDB answers again."""
    schedule: RenewalSchedule[str] = RenewalSchedule(H)
    assert schedule.oldest_slot() is None
    schedule.add("a", now=0.0)
    schedule.add("b", now=0.0)
    assert schedule.oldest_slot() == pytest.approx(2.5)
    for key, _ in schedule.pop_due(5.0):
        schedule.retry(key, at=6.0)
    assert schedule.oldest_slot() == pytest.approx(2.5)
    schedule.pop_due(6.0)
    schedule.succeeded("b", now=6.1)
    assert schedule.oldest_slot() == pytest.approx(5.0)


def test_a_worker_whose_renewals_fall_a_heartbeat_behind_takes_no_streams() -> None:
    """Admission control: more than one heartbeat behind, ``is_behind`` says stop acquiring."""
    from types import SimpleNamespace
    from typing import Any, cast

    from streamlease.settings import Settings
    from worker.ownership.renewal import Renewals

    renewals = Renewals(cast(Any, SimpleNamespace(settings=Settings(heartbeat_seconds=H))))
    holder = cast(Any, SimpleNamespace(stream_id="a", epoch=1))
    renewals.track(holder, cast(Any, None), now_mono=0.0)  # due at 5.0
    assert not renewals.is_behind(now_mono=9.9)
    assert renewals.is_behind(now_mono=10.1)
    assert renewals.behind_seconds(now_mono=10.1) == pytest.approx(5.1)
    renewals.untrack("a", 1)
    assert not renewals.is_behind(now_mono=100.0)
