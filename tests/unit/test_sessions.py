"""The pure parts of sessions: the checkpoint vector, slots, expiries that only grow, and the
dead-session verdict on the observer's own clock (architecture §4a)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlease import checkpoints, rules
from streamlease.rules import BREAKER_LEASES, DeadSessionDetector
from worker.slots import SlotTable

LEASE = 20.0

entries = st.lists(
    st.one_of(
        st.none(),
        st.tuples(st.integers(1, 2**63 - 1), st.integers(0, 2**63 - 1)),
    ),
    max_size=300,
)


@given(entries)
def test_the_vector_round_trips(values: list[tuple[int, int] | None]) -> None:
    """Whatever the slots hold, decode(encode(x)) is x without its trailing free slots."""
    trimmed = list(values)
    while trimmed and trimmed[-1] is None:
        trimmed.pop()
    assert checkpoints.decode(checkpoints.encode(values)) == trimmed


def test_a_hundred_streams_fit_well_under_a_kilobyte() -> None:
    """Realistic epochs and seqs: a worker at 100 streams renews a small item."""
    vector = checkpoints.encode([(e, 1_000_000 + e) for e in range(1, 101)])
    assert len(vector) < 600


@pytest.mark.parametrize("data", [b"\x02", b"\x01\x80", b"\x01\x05"])
def test_a_malformed_vector_is_refused(data: bytes) -> None:
    """Unknown version, a truncated varint, an epoch without its seq."""
    with pytest.raises(ValueError):
        checkpoints.decode(data)


def test_an_entry_is_read_by_slot_and_unreadable_means_none() -> None:
    vector = checkpoints.encode([None, (3, 41)])
    assert checkpoints.entry_at(vector, 1) == (3, 41)
    assert checkpoints.entry_at(vector, 0) is None
    assert checkpoints.entry_at(vector, 7) is None
    assert checkpoints.entry_at(b"\x09", 0) is None
    assert checkpoints.entry_at(None, 0) is None


def test_a_checkpoint_counts_only_for_the_epoch_it_names() -> None:
    """An entry of another epoch belongs to another holding of the slot."""
    assert rules.checkpoint_for((5, 99), 5) == 99
    assert rules.checkpoint_for((4, 99), 5) is None
    assert rules.checkpoint_for(None, 5) is None


def test_session_expiries_only_grow() -> None:
    """Send time + lease, and strictly above the previous even if the wall clock stepped back."""
    assert rules.next_session_expiry_ms(1_000, 20_000, 0) == 21_000
    assert rules.next_session_expiry_ms(1_000, 20_000, 25_000) == 25_001


# --- slots -------------------------------------------------------------------------------------


def test_a_freed_slot_is_reused_only_after_a_renewal_sent_later_succeeded() -> None:
    """Until then the last successful renewal may still name the old stream in that slot."""
    slots = SlotTable(4)
    first = slots.reserve(cleared_before_mono=0.0)
    assert first == 0
    slots.hold(0, 7, 40)
    slots.free(0, now_mono=10.0)
    assert slots.reserve(cleared_before_mono=9.0) == 1
    assert slots.reserve(cleared_before_mono=10.5) == 0


def test_a_slot_whose_acquire_got_no_answer_is_never_used_again() -> None:
    """Its write may still land with that slot on the stream item."""
    slots = SlotTable(3)
    slot = slots.reserve(0.0)
    assert slot is not None
    slots.cancel(slot, landed_unknown=True)
    assert [slots.reserve(100.0), slots.reserve(100.0), slots.reserve(100.0)] == [1, 2, None]


def test_the_vector_says_what_each_slot_holds() -> None:
    slots = SlotTable(4)
    for _ in range(3):
        slots.reserve(0.0)
    slots.hold(0, 2, 10)
    slots.hold(2, 9, 77)
    assert checkpoints.decode(slots.vector()) == [(2, 10), None, (9, 77)]
    slots.free(2, 1.0)
    assert checkpoints.decode(slots.vector()) == [(2, 10)]


# --- the dead-session verdict ------------------------------------------------------------------


def observed(detector: DeadSessionDetector, at: float, **hbs: int) -> None:
    detector.observe(((sid, hb, True) for sid, hb in hbs.items()), at)


def test_a_session_is_dead_after_its_hb_stood_still_for_a_lease_of_reads() -> None:
    detector = DeadSessionDetector(LEASE)
    observed(detector, 0.0, a=5, b=9)
    observed(detector, LEASE - 0.1, a=5, b=10)
    assert detector.to_expire(LEASE - 0.1, observer_healthy=True) == []
    observed(detector, LEASE, a=5, b=11)
    assert detector.to_expire(LEASE, observer_healthy=True) == ["a"]
    assert detector.seen_hb("a") == 5


def test_an_hb_that_moves_resets_the_clock() -> None:
    detector = DeadSessionDetector(LEASE)
    observed(detector, 0.0, a=5, b=1)
    observed(detector, 15.0, a=6, b=2)
    observed(detector, 30.0, a=6, b=3)
    assert detector.to_expire(30.0, observer_healthy=True) == []


def test_a_frozen_observer_judges_nobody_on_waking() -> None:
    """Only reads count: the first read after a long freeze starts the clock afresh."""
    detector = DeadSessionDetector(LEASE)
    observed(detector, 0.0, a=5, b=1)
    observed(detector, 500.0, a=90, b=70)  # woke up: everyone moved on meanwhile
    assert detector.to_expire(500.0, observer_healthy=True) == []


def test_an_unhealthy_observer_expires_nobody() -> None:
    detector = DeadSessionDetector(LEASE)
    observed(detector, 0.0, a=5, b=1)
    observed(detector, 2 * LEASE, a=5, b=9)
    assert detector.to_expire(2 * LEASE, observer_healthy=False) == []
    assert detector.to_expire(2 * LEASE + 1, observer_healthy=True) == ["a"]


def test_when_every_other_session_looks_dead_the_observer_waits() -> None:
    """All stale at once (two or more): probably the observer or the store is sick. The verdict
    waits more leases, then proceeds at the rate limit."""
    detector = DeadSessionDetector(LEASE)
    observed(detector, 0.0, a=1, b=1, c=1)
    observed(detector, LEASE, a=1, b=1, c=1)
    assert detector.to_expire(LEASE, observer_healthy=True) == []
    assert detector.breaker_open
    later = LEASE + BREAKER_LEASES * LEASE
    observed(detector, later, a=1, b=1, c=1)
    assert len(detector.to_expire(later, observer_healthy=True)) == 1


def test_one_peer_of_one_is_expired_without_waiting() -> None:
    """A fleet of two: the other session alone is not "everyone"."""
    detector = DeadSessionDetector(LEASE)
    observed(detector, 0.0, a=1)
    observed(detector, LEASE, a=1)
    assert detector.to_expire(LEASE, observer_healthy=True) == ["a"]


def test_expiries_are_rate_limited() -> None:
    detector = DeadSessionDetector(LEASE)
    observed(detector, 0.0, a=1, b=1, c=3)
    observed(detector, LEASE, a=1, b=1, c=4)
    assert detector.to_expire(LEASE, observer_healthy=True) == ["a"]
    assert detector.to_expire(LEASE + 0.5, observer_healthy=True) == []
    assert detector.to_expire(LEASE + 1.0, observer_healthy=True) == ["a"]


def test_tombstones_and_draining_are_judged_by_their_state() -> None:
    """A session already EXPIRED is not expired again."""
    detector = DeadSessionDetector(LEASE)
    detector.observe([("x", 3, False), ("b", 1, True)], 0.0)
    detector.observe([("x", 3, False), ("b", 2, True)], 2 * LEASE)
    assert detector.to_expire(2 * LEASE, observer_healthy=True) == []
