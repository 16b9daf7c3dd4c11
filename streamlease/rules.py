"""Pure lease rules: functions of (item fields, now, me). No I/O and no clock reads.

Two clocks appear here and are never mixed:

- *wall* milliseconds since the epoch (``*_ms``) — what DynamoDB stores and conditions compare;
- *monotonic* seconds (``*_mono``) — a holder's own deadlines, immune to clock steps.
"""

from __future__ import annotations

import math


def acquire_cutoff_ms(now_ms: int, clock_skew_ms: int) -> int:
    """The ``:now`` of an acquire condition: a lease is takeable if it expired before this.

    Subtracting the skew allowance means a worker whose clock runs fast by up to ``clock_skew_ms``
    still cannot take a lease that is live by the holder's clock.
    """
    return now_ms - clock_skew_ms


def is_expired(expires_at_ms: int, now_ms: int, clock_skew_ms: int = 0) -> bool:
    """True when a lease expiring at ``expires_at_ms`` may be taken over at ``now_ms``.

    ``expires_at_ms == 0`` (released or never owned) is always expired.
    """
    return expires_at_ms < acquire_cutoff_ms(now_ms, clock_skew_ms)


def new_expiry_ms(now_ms: int, lease_ms: int) -> int:
    """Expiry written by an acquire or renewal sent at wall time ``now_ms``."""
    return now_ms + lease_ms


def renewal_due_mono(last_sent_mono: float, heartbeat_seconds: float) -> float:
    """When the next renewal of a lease should be sent, one heartbeat after the last send."""
    return last_sent_mono + heartbeat_seconds


def fence_deadline_mono(
    last_success_sent_mono: float, lease_seconds: float, fence_margin_seconds: float
) -> float:
    """Until when a holder may deliver messages (monotonic seconds).

    Measured from the moment the last *successful* renewal (or the acquire) was *sent*: DynamoDB
    set the expiry to (its receive time + lease) ≥ (send time + lease), so stopping ``margin``
    before send time + lease stops strictly before anyone else may acquire.
    """
    return last_success_sent_mono + lease_seconds - fence_margin_seconds


def is_safe_to_deliver(now_mono: float, deadline_mono: float) -> bool:
    """True while the holder is still inside its self-fencing deadline."""
    return now_mono < deadline_mono


def suspect_bound_ms(now_ms: int, lease_ms: int, heartbeat_ms: int) -> int:
    """Upper bound of ``lease_expires_at_ms`` below which a live lease has missed heartbeats.

    A holder renews every heartbeat, so a healthy lease always has more than
    ``lease − heartbeat`` left; less than ``lease − 2 × heartbeat`` left means two renewals
    were missed.
    """
    return now_ms + lease_ms - 2 * heartbeat_ms


def is_suspect(
    expires_at_ms: int, now_ms: int, lease_ms: int, heartbeat_ms: int, clock_skew_ms: int = 0
) -> bool:
    """True for a lease that is still live but has missed at least two heartbeats."""
    return not is_expired(expires_at_ms, now_ms, clock_skew_ms) and expires_at_ms < (
        suspect_bound_ms(now_ms, lease_ms, heartbeat_ms)
    )


def takeover_at_ms(expires_at_ms: int, clock_skew_ms: int) -> int:
    """The first wall time at which a suspect lease can be acquired (just after its expiry)."""
    return expires_at_ms + clock_skew_ms + 1


def fair_share(streams: int, live_workers: int) -> int:
    """Streams each live worker should hold: ``ceil(streams / live_workers)``.

    With no live worker known (the caller is always live, so this is a transient read), a worker
    counts itself: the result is ``streams``.
    """
    if streams <= 0:
        return 0
    return math.ceil(streams / max(1, live_workers))


def streams_to_shed(held: int, share: int, slack: int, batch: int) -> int:
    """How many streams a worker holding ``held`` hands off this round.

    Nothing until it holds more than ``share + slack``; then the excess over ``share``, at most
    ``batch`` at a time so the fleet converges without a thundering herd.
    """
    if held <= share + slack:
        return 0
    return min(batch, held - share)


def may_take_more(held: int, share: int, capacity: int) -> bool:
    """Whether a worker should poll for start and handoff commands: not above its fair share,
    and below capacity.

    A worker exactly *at* its share still polls. The share is counted from worker items and
    the last reconcile, so it lags the streams just created or just released by a draining
    peer; if workers at their share stopped polling, a balanced fleet would leave those
    commands to the next reconcile round instead of answering them within a second. Taking one
    more leaves a worker at share + 1, which the rebalancer's slack tolerates; workers above
    their share stay out, so a worker that just joined (far below its share) still gets most.
    """
    return held <= share and held < capacity


def free_capacity(held: int, capacity: int) -> int:
    """How many more streams a worker may acquire."""
    return max(0, capacity - held)


def may_shed(acquired_mono: float, now_mono: float, min_tenure_seconds: float) -> bool:
    """A stream is shed only after it has been held for the minimum tenure."""
    return now_mono - acquired_mono >= min_tenure_seconds


def backoff_seconds(attempt: int, base_seconds: float, max_seconds: float, rand: float) -> float:
    """Exponential backoff with full jitter for reconnect ``attempt`` (0 = first retry).

    ``rand`` is a uniform sample from [0, 1), passed in so the rule stays pure.
    """
    if attempt < 0:
        raise ValueError("attempt must be >= 0")
    ceiling = min(max_seconds, base_seconds * (2 ** min(attempt, 62)))
    return float(rand * ceiling)
