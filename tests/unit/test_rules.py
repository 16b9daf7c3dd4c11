"""The pure lease rules (streamlease.rules) at their edges: no clock, no I/O."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlease import rules

NOW = 1_800_000_000_000  # wall ms
LEASE = 20_000
HEARTBEAT = 5_000
SKEW = 1_000

wall_ms = st.integers(min_value=0, max_value=4_000_000_000_000)
skews = st.integers(min_value=0, max_value=60_000)


# --- expiry and skew -------------------------------------------------------------------------


def test_cutoff_is_now_minus_the_skew_allowance():
    """An acquirer compares expiries against its clock moved back by the skew."""
    assert rules.acquire_cutoff_ms(NOW, SKEW) == NOW - SKEW


@pytest.mark.parametrize(
    ("expires_at_ms", "expired"),
    [
        (NOW - SKEW - 1, True),  # one ms before the cutoff
        (NOW - SKEW, False),  # exactly at the cutoff: not yet
        (NOW - SKEW + 1, False),
        (NOW - 1, False),  # expired by the holder's clock, within the skew allowance
        (NOW, False),
        (NOW + LEASE, False),
    ],
)
def test_expiry_is_strictly_before_the_cutoff(expires_at_ms, expired):
    """A lease is takeable only once its expiry is strictly before now − skew."""
    assert rules.is_expired(expires_at_ms, NOW, SKEW) is expired


def test_without_skew_a_lease_expires_strictly_after_its_expiry():
    """With no allowance the boundary is the expiry itself, still strict."""
    assert not rules.is_expired(NOW, NOW)
    assert rules.is_expired(NOW - 1, NOW)


def test_zero_expiry_means_free():
    """Released or never-owned leases (expiry 0) are always takeable at any real time."""
    assert rules.is_expired(0, NOW, SKEW)
    assert rules.is_expired(0, NOW, 60_000)


@given(expires=wall_ms, skew=skews)
def test_takeover_time_is_the_first_instant_a_lease_is_expired(expires, skew):
    """takeover_at_ms is exactly the first wall ms at which is_expired turns true."""
    at = rules.takeover_at_ms(expires, skew)
    assert rules.is_expired(expires, at, skew)
    assert not rules.is_expired(expires, at - 1, skew)


@given(now=wall_ms, lease=st.integers(min_value=1, max_value=600_000), skew=skews)
def test_a_fresh_lease_is_never_expired_for_anyone_within_skew(now, lease, skew):
    """A lease written at ``now`` is not takeable by a clock up to ``skew`` ahead."""
    expires = rules.new_expiry_ms(now, lease)
    assert expires == now + lease
    assert not rules.is_expired(expires, now + lease + skew, skew)


# --- holder timing ---------------------------------------------------------------------------


def test_renewal_is_due_one_heartbeat_after_the_last_send():
    """Renewals are scheduled from send times on the monotonic clock."""
    assert rules.renewal_due_mono(100.0, 5.0) == 105.0


def test_fence_deadline_is_lease_minus_margin_after_the_last_successful_send():
    """A holder stops delivering margin seconds before its lease could lapse."""
    assert rules.fence_deadline_mono(100.0, 20.0, 2.0) == 118.0


@pytest.mark.parametrize(
    ("now_mono", "safe"),
    [(117.999, True), (118.0, False), (118.001, False)],
)
def test_delivery_stops_at_the_fence_deadline(now_mono, safe):
    """Delivery is safe strictly before the deadline, never at or after it."""
    deadline = rules.fence_deadline_mono(100.0, 20.0, 2.0)
    assert rules.is_safe_to_deliver(now_mono, deadline) is safe


def test_fence_with_zero_margin_ends_exactly_at_send_time_plus_lease():
    """Margin 0 still stops before the earliest possible takeover (send + lease)."""
    deadline = rules.fence_deadline_mono(100.0, 20.0, 0.0)
    assert deadline == 120.0
    assert not rules.is_safe_to_deliver(120.0, deadline)


# --- suspects --------------------------------------------------------------------------------


def test_suspect_bound_is_two_heartbeats_short_of_a_full_lease():
    """A healthy lease always has more than lease − heartbeat left; two misses go below."""
    assert rules.suspect_bound_ms(NOW, LEASE, HEARTBEAT) == NOW + LEASE - 2 * HEARTBEAT


@pytest.mark.parametrize(
    ("expires_at_ms", "suspect"),
    [
        (NOW + LEASE, False),  # just renewed
        (NOW + LEASE - HEARTBEAT, False),  # renewal due now: one heartbeat late at most
        (NOW + LEASE - 2 * HEARTBEAT, False),  # exactly at the bound: strict
        (NOW + LEASE - 2 * HEARTBEAT - 1, True),
        (NOW, True),  # lapses now, but nobody may take it yet
        (NOW - SKEW, True),  # inside the skew allowance: still live to an acquirer
        (NOW - SKEW - 1, False),  # expired: an orphan, no longer a suspect
        (0, False),  # released
    ],
)
def test_suspects_are_live_leases_that_missed_two_heartbeats(expires_at_ms, suspect):
    """is_suspect: below the suspect bound but not yet takeable."""
    assert rules.is_suspect(expires_at_ms, NOW, LEASE, HEARTBEAT, SKEW) is suspect


# --- fleet balance ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("streams", "workers", "share"),
    [
        (0, 0, 0),
        (0, 5, 0),
        (-3, 2, 0),
        (10, 0, 10),  # no live worker known yet: the caller counts itself
        (10, 1, 10),
        (9, 3, 3),
        (10, 3, 4),  # rounded up so the shares cover every stream
        (1, 50, 1),
    ],
)
def test_fair_share_is_ceil_of_streams_over_live_workers(streams, workers, share):
    """fair_share = ceil(streams / max(1, workers)), and 0 without streams."""
    assert rules.fair_share(streams, workers) == share


@pytest.mark.parametrize(
    ("held", "share", "capacity", "polls"),
    [
        (0, 0, 100, True),  # a new fleet: the empty worker still polls for the first stream
        (1, 0, 100, False),
        (0, 1, 100, True),
        (2, 3, 100, True),
        (3, 3, 100, True),  # at fair share: the share lags new and handed-off streams
        (4, 3, 100, False),  # above it: leave commands to emptier workers
        (2, 10, 2, False),  # at capacity
        (1, 10, 2, True),
        (5, 5, 5, False),  # at share but at capacity
    ],
)
def test_may_take_more_up_to_share_and_below_capacity(held, share, capacity, polls):
    """A worker polls while not above its fair share and below its capacity."""
    assert rules.may_take_more(held, share, capacity) is polls


@pytest.mark.parametrize(
    ("held", "fill_to", "hold_off", "polls"),
    [
        (9, 9, True, False),  # at its share while others lack: it leaves the queue to them
        (8, 9, True, True),  # below the line takers fill to: one of them
        (9, 9, False, True),  # at rest: at the share it polls for new streams
        (10, 9, False, False),  # above the share
        (8, 8, True, False),  # at the line, below the share rounded up
        (8, 8, False, True),
    ],
)
def test_a_worker_that_lacks_nothing_holds_off_while_the_fleet_rebalances(
    held, fill_to, hold_off, polls
):
    """Share 9, capacity 100: SQS answers whoever asks first, so while givers shed into what
    some workers lack the ones that lack none stay out of the queue."""
    assert rules.may_take_more(held, 9, 100, fill_to=fill_to, hold_off=hold_off) is polls


@pytest.mark.parametrize(("held", "capacity", "free"), [(0, 10, 10), (7, 10, 3), (10, 10, 0)])
def test_free_capacity(held, capacity, free):
    """Free capacity is what is left under the cap."""
    assert rules.free_capacity(held, capacity) == free


def test_free_capacity_is_never_negative():
    """A worker over capacity (after a settings change) has no room, not negative room."""
    assert rules.free_capacity(12, 10) == 0


@pytest.mark.parametrize(("held_for", "may"), [(59.999, False), (60.0, True), (61.0, True)])
def test_streams_are_shed_only_after_the_minimum_tenure(held_for, may):
    """The minimum tenure is inclusive: held exactly that long may be shed."""
    assert rules.may_shed(1000.0, 1000.0 + held_for, 60.0) is may


# --- reconnect backoff -----------------------------------------------------------------------


def test_backoff_starts_below_the_base():
    """The first retry waits up to base seconds, scaled by the jitter sample."""
    assert rules.backoff_seconds(0, 0.5, 30.0, 0.0) == 0.0
    assert rules.backoff_seconds(0, 0.5, 30.0, 0.5) == 0.25


def test_backoff_doubles_per_attempt_until_the_max():
    """Ceiling base × 2^attempt, capped at max."""
    ceilings = [rules.backoff_seconds(n, 0.5, 30.0, 0.999_999) for n in range(10)]
    assert ceilings[:6] == pytest.approx([0.5, 1, 2, 4, 8, 16], rel=1e-5)
    assert ceilings[6:] == pytest.approx([30.0] * 4, rel=1e-5)


@pytest.mark.parametrize("attempt", [63, 1_000, 10**9])
def test_backoff_caps_the_exponent_so_huge_attempts_do_not_overflow(attempt):
    """Any attempt number gives a finite wait no longer than max."""
    assert rules.backoff_seconds(attempt, 0.5, 30.0, 0.5) == 15.0


@given(
    attempt=st.integers(0, 10_000),
    base=st.floats(0.001, 10.0),
    cap=st.floats(0.001, 600.0),
    rand=st.floats(0.0, 1.0, exclude_max=True),
)
def test_backoff_is_within_zero_and_its_ceiling(attempt, base, cap, rand):
    """Full jitter: 0 <= wait <= min(max, base × 2^attempt) (equal only by float rounding)."""
    wait = rules.backoff_seconds(attempt, base, cap, rand)
    assert 0.0 <= wait <= min(cap, base * 2.0 ** min(attempt, 62))


def test_backoff_rejects_a_negative_attempt():
    """Attempt numbers start at 0."""
    with pytest.raises(ValueError, match="attempt"):
        rules.backoff_seconds(-1, 0.5, 30.0, 0.5)


# --- fleet scale -----------------------------------------------------------------------------


def test_a_watch_window_is_complete_with_enough_live_peers_that_renew():
    """Dead or tombstoned sessions in between do not count: the window reads past them."""
    live, stale, gone = (True, False), (True, True), (False, False)
    assert not rules.window_complete([live, stale, gone, live], peers=3)
    assert rules.window_complete([live, stale, gone, live, live], peers=3)
    assert not rules.window_complete([], peers=1)


@pytest.mark.parametrize(
    ("live", "segments"),
    [(1, 1), (7, 1), (8, 2), (15, 2), (16, 4), (100, 16), (128, 32), (10_000, 32)],
)
def test_the_orphan_index_is_scanned_in_a_power_of_two_of_segments(live, segments):
    """One request reads a small fleet's orphans; a large fleet splits them, about four
    workers per segment, never more segments than shards."""
    assert rules.scan_segments(live, 32) == segments


@given(st.integers(min_value=0, max_value=100_000), st.integers(min_value=1, max_value=64))
def test_scan_segments_stay_within_one_and_the_shards(live, shards):
    segments = rules.scan_segments(live, shards)
    assert 1 <= segments <= shards
    assert segments & (segments - 1) == 0 or segments == shards


@pytest.mark.parametrize(("sessions", "chance"), [(1, 1.0), (3, 1.0), (30, 0.1), (1000, 0.003)])
def test_a_quiet_digest_is_claimed_by_a_few_workers_not_all(sessions, chance):
    assert rules.claim_chance(sessions) == pytest.approx(chance)
