"""Pure lease rules: functions of (item fields, now, me). No I/O and no clock reads.

Two clocks appear here and are never mixed:

- *wall* milliseconds since the epoch (``*_ms``) — what DynamoDB stores and conditions compare;
- *monotonic* seconds (``*_mono``) — a holder's own deadlines, immune to clock steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from streamlease.checkpoints import Checkpoint, stream_tag


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


RETRY_FRACTION: Final = 0.25
"""An unanswered renewal is retried after about this fraction of a heartbeat."""
MIN_RETRY_SECONDS: Final = 0.05


def retry_delay_seconds(heartbeat_seconds: float, rand: float) -> float:
    """Pause before retrying an unanswered renewal: a jittered quarter heartbeat (``rand``
    uniform in [0, 1))."""
    return max(MIN_RETRY_SECONDS, heartbeat_seconds * RETRY_FRACTION * (0.5 + rand))


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


def may_take_more(
    held: int, share: int, capacity: int, *, fill_to: int = 0, hold_off: bool = False
) -> bool:
    """Whether a worker should poll for start and handoff commands: below capacity, and below
    the line takers fill to (``fill_to``), or not above its fair share unless it should
    ``hold_off``: the fleet rebalances (workers above share + slack shed into what others
    lack below that line, :meth:`worker.ownership.fleet_view.FleetView.holds_off`).

    A worker exactly *at* its share still polls otherwise. The share is counted from worker
    items and the last reconcile, so it lags the streams just created or just released by a
    draining or dead peer; if workers at their share stopped polling, those commands would wait
    for the next reconcile round instead of being answered within a second. Taking one more
    leaves a worker at share + 1, which the rebalancer's slack tolerates; workers above their
    share stay out, so a worker that just joined (far below its share) still gets most.

    While the fleet rebalances, a worker that lacks nothing stays out: SQS gives a message to
    whichever worker polls first, and at the end of a scale-out a few dozen workers below their
    share poll among a thousand at it. A rebalance handoff would reach one of them only by
    chance, land on a worker at its share after the pass-on limit, and stay there for its
    tenure.
    """
    if held >= capacity:
        return False
    return held < fill_to or (held <= share and not hold_off)


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


# --- sessions (architecture §4a) ---------------------------------------------------------------


def next_session_expiry_ms(now_ms: int, lease_ms: int, previous_ms: int) -> int:
    """Expiry written by a session renewal sent at wall time ``now_ms``.

    Send time + lease, and strictly above the previous renewal's: the renewal's condition only
    lets an expiry grow, so a wall clock stepped back never makes a renewal fail, and an older
    renewal that DynamoDB applies late (after a newer one) is refused instead of shortening it.
    """
    return max(now_ms + lease_ms, previous_ms + 1)


def checkpoint_for(entry: Checkpoint | None, stream_id: str, item_epoch: int) -> int | None:
    """What a dead session's checkpoint-vector ``entry`` says about ``stream_id`` held at
    ``item_epoch``: its acknowledged seq if the entry names that *same* epoch and carries that
    stream's tag, else nothing (an entry of another epoch or tag belongs to another holding of
    the slot). An untagged entry (the older format, :mod:`streamlease.checkpoints`) is matched
    by epoch alone.

    The stream resumes at the larger of this and the item's own ``last_seq`` (the store's
    conditional write keeps the larger).
    """
    if entry is None or entry.epoch != item_epoch:
        return None
    if entry.tag is not None and entry.tag != stream_tag(stream_id):
        return None
    return entry.last_seq


UNREACHABLE_LEASES: Final = 4.0
"""A worker that has had no renewal answered, in any of its sessions, for this many leases
reports itself unhealthy and exits: it can hold nothing, and a replacement may fare better."""


def is_unreachable(now_mono: float, last_answer_mono: float, lease_seconds: float) -> bool:
    """True when the last renewal answered (or the first session's creation) is
    :data:`UNREACHABLE_LEASES` leases old."""
    return now_mono - last_answer_mono >= UNREACHABLE_LEASES * lease_seconds


LOST_WRITE_LANDS_LEASES: Final = 2.0
"""A write whose answer was lost has landed, or never will, within this many leases of being
sent (DynamoDB gives up on a request long before): a checkpoint slot whose acquire got no
answer is not recovered sooner, as the sweep of a tombstone does not delete it sooner."""

BREAKER_LEASES: Final = 2.0
"""When every other session (at least two) looks dead at once, wait this many more leases of
it before expiring any: the observer's reads or the store are more likely sick than the fleet."""
MIN_SECONDS_BETWEEN_EXPIRIES: Final = 1.0
"""One observer expires at most one session per this many seconds (a rate limit, like
Kubernetes' node eviction rate): a wrong verdict never takes the whole fleet at once."""


@dataclass
class _Seen:
    hb: int
    since_mono: float
    live: bool


class DeadSessionDetector:
    """Which peer sessions have certainly fenced themselves, judged on the observer's clock.

    The DynamoDB lock client's rule: a session whose ``hb`` this observer has *read* unchanged
    for a whole lease of its own monotonic clock cannot renew any more without the tombstone's
    condition (``hb = :seen``) failing, and its holder stopped delivering before that (its
    deadline is its last renewal's send time + lease − margin, and that renewal was applied
    before our first read of its ``hb``). Only reads count: a frozen observer that wakes up has
    seen nothing new, so it judges nobody until it has read the fleet twice a lease apart.

    Guards (architecture §4a): an observer whose own session is not healthy expires nobody; when
    every other session (at least two) looks dead at once the observer waits
    :data:`BREAKER_LEASES` more leases; at most one expiry per
    :data:`MIN_SECONDS_BETWEEN_EXPIRIES`.
    """

    def __init__(self, lease_seconds: float) -> None:
        """``lease_seconds``: how long an unchanged ``hb`` proves a session dead."""
        self.lease_seconds = lease_seconds
        self._seen: dict[str, _Seen] = {}
        self._all_stale_since: float | None = None
        self._last_expiry = -math.inf

    def observe(self, sessions: Iterable[tuple[str, int, bool]], now_mono: float) -> None:
        """A fresh read of the fleet: ``(session id, hb, live)`` of every session but the
        observer's own, read at ``now_mono`` (the answer's arrival)."""
        seen: dict[str, _Seen] = {}
        for session_id, hb, live in sessions:
            before = self._seen.get(session_id)
            if before is not None and before.hb == hb:
                seen[session_id] = _Seen(hb, before.since_mono, live)
            else:
                seen[session_id] = _Seen(hb, now_mono, live)
        self._seen = seen

    def unchanged_seconds(self, session_id: str, now_mono: float) -> float:
        """How long the observer has read the same ``hb`` of ``session_id`` (0: unknown)."""
        seen = self._seen.get(session_id)
        return 0.0 if seen is None else max(0.0, now_mono - seen.since_mono)

    def is_stale(self, session_id: str, now_mono: float) -> bool:
        """True when ``session_id``'s ``hb`` has not moved for a whole lease (not yet a
        verdict: see :meth:`to_expire` for the guards)."""
        return self.unchanged_seconds(session_id, now_mono) >= self.lease_seconds

    def seen_hb(self, session_id: str) -> int | None:
        """The ``hb`` last read for ``session_id`` (the tombstone's condition)."""
        seen = self._seen.get(session_id)
        return None if seen is None else seen.hb

    def to_expire(self, now_mono: float, *, observer_healthy: bool) -> list[str]:
        """The sessions to tombstone now (at most one), stalest first; [] while a guard holds."""
        live = {sid: s for sid, s in self._seen.items() if s.live}
        stale = sorted(
            (sid for sid in live if self.is_stale(sid, now_mono)),
            key=lambda sid: live[sid].since_mono,
        )
        if len(live) >= 2 and len(stale) == len(live):
            if self._all_stale_since is None:
                self._all_stale_since = now_mono
            if now_mono - self._all_stale_since < BREAKER_LEASES * self.lease_seconds:
                return []
        else:
            self._all_stale_since = None
        if not stale or not observer_healthy:
            return []
        if now_mono - self._last_expiry < MIN_SECONDS_BETWEEN_EXPIRIES:
            return []
        self._last_expiry = now_mono
        return stale[:1]

    @property
    def breaker_open(self) -> bool:
        """True while the all-stale guard is holding expiries back."""
        return self._all_stale_since is not None


# --- fleet scale: watching a bounded set of peers, reading the orphan index in segments -------

WATCH_PEERS: Final = 3
"""In a large fleet each worker watches the sessions that follow its own in the fleet index
(a ring in start order), as many as it takes to see this many live peers that renew: every
session is then watched by the few before it, plus the fleet's elected watcher, instead of by
every worker."""
FULL_READ_MAX_SESSIONS: Final = 12
"""A fleet of at most this many session items is read whole every round: one small query, what
a window read would cost anyway (half a read unit up to about 4 KB of items)."""
SEGMENT_READERS: Final = 4
"""Workers that scan each segment of the orphan index per reconcile round, on average."""
DIGEST_CLAIMERS: Final = 3.0
"""Workers expected to try at once to take over a fleet digest whose writer went quiet."""


def window_complete(entries: Iterable[tuple[bool, bool]], peers: int = WATCH_PEERS) -> bool:
    """Whether a watch window read so far is enough: ``entries`` are ``(live, stale)`` of the
    sessions read after the observer's own; enough once ``peers`` of them are live and not
    stale. Dead and tombstoned sessions in between stay in the window, so a run of dead
    sessions is always watched by the first live one before it."""
    return sum(1 for live, stale in entries if live and not stale) >= peers


def scan_segments(live_workers: int, shards: int, readers: int = SEGMENT_READERS) -> int:
    """How many segments the orphan index is scanned in: each worker scans one, at random, per
    round. A power of two, so that about ``readers`` workers scan each segment every round;
    1 for a small fleet (one request reads every orphan, as a single query did); at most
    ``shards`` (the index's partition key values)."""
    per = max(1, live_workers // max(1, readers))
    return max(1, min(shards, 1 << (per.bit_length() - 1)))


def claim_chance(sessions: int) -> float:
    """The chance that a worker finding the fleet digest unwritten for a lease tries to take
    it over this round: about :data:`DIGEST_CLAIMERS` of ``sessions`` try, not all at once."""
    return min(1.0, DIGEST_CLAIMERS / max(1, sessions))
