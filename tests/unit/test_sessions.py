"""The pure parts of sessions: the checkpoint vector, slots, expiries that only grow, and the
dead-session verdict on the observer's own clock (architecture §4a)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlease import checkpoints, rules
from streamlease.rules import BREAKER_LEASES, DeadSessionDetector
from streamlease.seqs import MAX_SEQ, NOTHING_DELIVERED
from worker.fencing.slots import HeldCheckpoint, SlotTable

LEASE = 20.0

entries = st.lists(
    st.one_of(
        st.none(),
        st.builds(
            checkpoints.Checkpoint,
            st.integers(1, MAX_SEQ),
            st.integers(0, MAX_SEQ),
            st.integers(0, 0xFFFF),
        ),
    ),
    max_size=300,
)


@given(entries)
def test_the_vector_round_trips(values: list[checkpoints.Checkpoint | None]) -> None:
    """Whatever the slots hold, decode(encode(x)) is x without its trailing free slots."""
    trimmed = list(values)
    while trimmed and trimmed[-1] is None:
        trimmed.pop()
    assert checkpoints.decode(checkpoints.encode(values)) == trimmed


def held(epoch: int, seq: int, stream_id: str) -> checkpoints.Checkpoint:
    return checkpoints.Checkpoint(epoch, seq, checkpoints.stream_tag(stream_id))


def holding(epoch: int, seq: int, stream_id: str) -> HeldCheckpoint:
    return HeldCheckpoint(epoch, seq, checkpoints.stream_tag(stream_id))


def test_a_hundred_streams_fit_well_under_a_kilobyte() -> None:
    """Realistic epochs and seqs: a worker at 100 streams renews a small item (2 bytes of tag
    per stream on top of the untagged format's 401)."""
    vector = checkpoints.encode([held(e, 1_000_000 + e, f"s{e}") for e in range(1, 101)])
    assert len(vector) == 601


@pytest.mark.parametrize(
    "data",
    [b"\x03", b"\x02\x80", b"\x02\x05", b"\x02\x05\x00", b"\x02\x05\x00\x01", b"\x01\x05"],
)
def test_a_malformed_vector_is_refused(data: bytes) -> None:
    """Unknown version, a truncated varint, an epoch without its tag or seq (either version)."""
    with pytest.raises(ValueError):
        checkpoints.decode(data)


@pytest.mark.parametrize(
    "entry",
    [
        checkpoints.Checkpoint(0, 1, 1),
        checkpoints.Checkpoint(1, -1, 1),
        checkpoints.Checkpoint(1, MAX_SEQ + 1, 1),
        checkpoints.Checkpoint(1, 1, 0x10000),
        checkpoints.Checkpoint(1, 1, None),
    ],
)
def test_an_entry_out_of_range_or_without_a_tag_is_never_written(
    entry: checkpoints.Checkpoint,
) -> None:
    with pytest.raises(ValueError):
        checkpoints.encode([entry])


def test_an_untagged_vector_of_an_older_worker_is_read_with_no_tags() -> None:
    """Version 1 (epoch, seq per slot, no tag): what workers wrote before tags, still read
    during a rolling deploy."""
    version_1 = bytes([1, 3, 41, 0, 5, 0x80, 0x01])  # slot 0: (3, 41); 1 free; 2: (5, 128)
    assert checkpoints.decode(version_1) == [(3, 41, None), None, (5, 128, None)]


def test_an_entry_beyond_the_seq_bound_reads_as_free() -> None:
    """An older worker may have acknowledged a seq above 2^63 - 1: no stream resumes there."""
    version_1 = bytes([1, 3, *([0xFF] * 9), 0x01])  # seq 2^64 - 1
    assert checkpoints.decode(version_1) == [None]


def test_an_entry_is_read_by_slot_and_unreadable_means_none() -> None:
    vector = checkpoints.encode([None, held(3, 41, "a")])
    assert checkpoints.entry_at(vector, 1) == held(3, 41, "a")
    assert checkpoints.entry_at(vector, 0) is None
    assert checkpoints.entry_at(vector, 7) is None
    assert checkpoints.entry_at(b"\x09", 0) is None
    assert checkpoints.entry_at(None, 0) is None


def test_a_checkpoint_counts_only_for_the_epoch_and_stream_it_names() -> None:
    """An entry of another epoch or another stream's tag belongs to another holding of the
    slot; an untagged entry (an older worker's) is matched by epoch alone."""
    assert rules.checkpoint_for(held(5, 99, "a"), "a", 5) == 99
    assert rules.checkpoint_for(held(4, 99, "a"), "a", 5) is None
    assert rules.checkpoint_for(held(5, 99, "b"), "a", 5) is None
    assert rules.checkpoint_for(checkpoints.Checkpoint(5, 99), "a", 5) == 99
    assert rules.checkpoint_for(None, "a", 5) is None


def test_stream_tags_are_stable_and_tell_ids_apart() -> None:
    """The tag is part of the stored format: it must never change between versions."""
    assert checkpoints.stream_tag("btc-usd") == 0x9872  # pinned
    tags = {checkpoints.stream_tag(f"stream-{n}") for n in range(1000)}
    assert len(tags) > 980  # 1,000 ids in 65,536 tags: about 8 pairs share one


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
    slots.hold(0, holding(7, 40, "a"))
    slots.free(0, now_mono=10.0)
    assert slots.reserve(cleared_before_mono=9.0) == 1
    assert slots.reserve(cleared_before_mono=10.5) == 0


def test_a_lost_slot_is_not_used_again_until_recovered() -> None:
    """Its stream item may still name it; once a read showed it does not, the slot is
    quarantined like a freed one, then used again."""
    slots = SlotTable(3)
    slot = slots.reserve(0.0)
    assert slot == 0
    slots.hold(0, holding(1, 5, "a"))
    slots.lose(0, "a", check_after_mono=50.0)
    assert slots.entry(0) is None
    assert slots.lost_due(49.0) == []
    assert slots.lost_due(50.0) == [(0, "a")]
    assert [slots.reserve(100.0), slots.reserve(100.0), slots.reserve(100.0)] == [1, 2, None]
    slots.recover(0, now_mono=120.0)
    assert slots.reserve(110.0) is None
    assert slots.reserve(130.0) == 0


def test_lost_slots_first_use_the_spare_half_then_cost_capacity() -> None:
    """2 x capacity slots: up to capacity lost costs nothing; beyond, the usable capacity
    drops; below half of it the session should be replaced."""
    slots = SlotTable(8)
    for n in range(8):
        slots.reserve(0.0)
        if n < 6:
            slots.lose(n, f"s{n}", 0.0)
    usable = [min(4, 8 - lost) for lost in range(7)]
    assert usable == [4, 4, 4, 4, 4, 3, 2]
    assert slots.usable_capacity(4) == 2
    assert not slots.needs_rollover(4)
    slots.lose(6, "s6", 0.0)
    assert (slots.usable_capacity(4), slots.needs_rollover(4)) == (1, True)


def test_a_checkpoint_the_vector_cannot_carry_fails_its_holder_not_the_session() -> None:
    """Refused when held, so no renewal of the session ever fails to encode its vector."""
    slots = SlotTable(2)
    slots.reserve(0.0)
    for entry in (
        HeldCheckpoint(1, MAX_SEQ + 1, 7),
        HeldCheckpoint(1, NOTHING_DELIVERED - 1, 7),
        HeldCheckpoint(0, 1, 7),
        HeldCheckpoint(1, 1, 1 << 16),
    ):
        with pytest.raises(ValueError):
            slots.hold(0, entry)
    assert checkpoints.decode(slots.vector()) == []


def test_the_vector_says_what_each_slot_holds() -> None:
    slots = SlotTable(4)
    for _ in range(3):
        slots.reserve(0.0)
    slots.hold(0, holding(2, 10, "a"))
    slots.hold(2, holding(9, 77, "c"))
    assert checkpoints.decode(slots.vector()) == [held(2, 10, "a"), None, held(9, 77, "c")]
    slots.free(2, 1.0)
    assert checkpoints.decode(slots.vector()) == [held(2, 10, "a")]


def test_a_held_entry_moves_with_its_holders_acknowledgements() -> None:
    """The holder moves its entry's seq in place; every renewal reads it as it is then, and a
    freed slot's entry is no longer read (its holder's late moves change no vector)."""
    slots = SlotTable(4)
    slots.reserve(0.0)
    entry = holding(2, 10, "a")
    slots.hold(0, entry)
    entry.last_seq = 15
    assert slots.entry(0) == held(2, 15, "a")
    assert checkpoints.decode(slots.vector()) == [held(2, 15, "a")]
    slots.free(0, 1.0)
    entry.last_seq = 20
    assert checkpoints.decode(slots.vector()) == []


def test_a_stream_that_delivered_nothing_has_an_empty_slot_until_it_delivers_seq_0() -> None:
    """Nothing delivered is held (the vector cannot carry it: the slot reads as free, and a
    takeover resumes from the item, which says nothing delivered too); seq 0 is then carried
    as 0, so a takeover after it resumes at 1."""
    slots = SlotTable(2)
    slots.reserve(0.0)
    entry = holding(4, NOTHING_DELIVERED, "a")
    slots.hold(0, entry)
    assert slots.entry(0) is None
    assert checkpoints.decode(slots.vector()) == []
    entry.last_seq = 0
    assert checkpoints.decode(slots.vector()) == [held(4, 0, "a")]
    assert rules.checkpoint_for(slots.entry(0), "a", 4) == 0


def test_a_seq_the_vector_cannot_carry_leaves_its_slot_empty_not_the_renewal_failing() -> None:
    """A feed the worker numbers could pass 2^63 - 1 after being held: its slot reads as free
    (a takeover resumes it from its item), the other slots as they are."""
    slots = SlotTable(4)
    slots.reserve(0.0)
    slots.reserve(0.0)
    first, second = holding(2, 10, "a"), holding(3, 5, "b")
    slots.hold(0, first)
    slots.hold(1, second)
    first.last_seq = MAX_SEQ + 1
    assert checkpoints.decode(slots.vector()) == [None, held(3, 5, "b")]


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
