"""The fleet as one worker sees it: the fair share, and whether it may join at all.

Pure functions of the worker items (and this worker's own counts); :mod:`worker.liveness.fleet`
reads the items and keeps the view current.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from streamlease import placement, rules
from streamlease.errors import ConfigError
from streamlease.fleet_digest import FleetDigest
from streamlease.model import WorkerInfo
from streamlease.schema import Liveness, WorkerState

HOLD_OFF_ROUNDS: Final = 2
"""While the fleet rebalances a worker that lacks nothing stays out of the command queue, but
only while the deficit falls: once it has not reached a new low for this many rebalance rounds,
it polls again (:meth:`FleetView.holds_off`). A taker counted in the deficit may be unable to
take (on probation, behind on its renewals), and new streams must not wait for the orphan scan
meanwhile."""


@dataclass
class FleetView:
    """What this worker last learned about the fleet (written by the fleet watcher)."""

    share: int = 0
    """Fair share of streams per live worker; 0 until the first count."""
    live_workers: int = 1
    total_streams: int = 0
    orphans: int = 0
    """Streams wanted and unowned at the last reconcile (counted into the total)."""
    deficit: int = 0
    """Streams the workers with a part in the share lack to reach their taking share
    (:attr:`taking_share`: what shedding fills). This worker's own lack counts too: a giver has
    none, and the digest's writer publishes the fleet's, its own included."""
    surplus: int = 0
    """Streams the workers above share + slack (this one included) hold beyond the share (what
    shedding empties: each giver sheds its part of the deficit)."""
    load: placement.FleetLoad | None = None
    """The fleet's load when every sharing worker published one; None: counts decide."""
    taking_share: int = 0
    """The share this worker takes rebalance handoffs up to (:func:`wants_handoffs`): the
    streams over the workers rounded down where :attr:`share` rounds up, and the lower of the
    last two counts. While streams move the count runs high (a stream in flight counts for its
    giver's last renewal and for its taker's), by a few streams a worker at a thousand moves a
    second; a taker that filled up to such a count would hold more than the share it learns of
    next, and could not give the streams back for their tenure. Givers shed down to
    :attr:`share` and count what takers lack below this, so the two meet."""
    _last_floor: int | None = None
    fill_to_share: bool = False
    """Takers fill up to :attr:`share`, not :attr:`taking_share`: every worker holds at least
    the share rounded down, yet a giver still holds more than share + slack (few streams a
    worker: what is left over after rounding down outnumbers the givers' slack). Counted by a
    worker that reads the whole fleet (:func:`update_view`)."""
    shed_idle_rounds: int | None = None
    """This worker's shedding (written by the rebalancer,
    :func:`streamlease.placement.shed_rounds_idle`): rebalance rounds in a row that moved
    nothing since it started, None when it is not shedding."""
    updated_mono: float = 0.0
    surplus_seen_mono: float = -float("inf")
    """When a worker was last seen above share + slack (:attr:`surplus`)."""
    deficit_low: int | None = None
    """The lowest :attr:`deficit` since some worker began to lack streams (None: none lacks)."""
    deficit_fell_mono: float = -float("inf")
    """When :attr:`deficit_low` last fell (monotonic seconds, the fleet model's clock in the
    model): the rebalance's progress."""

    def note_balance(self, deficit: int, surplus: int, now: float) -> None:
        """Take a new count of what the workers lack and hold above share + slack, at ``now``.
        What the workers lack is measured from when it appears (or workers join:
        :meth:`recount`) until nobody lacks anything; it progresses when it reaches a new low.
        Any fall would not do: a deficit counted against a moving line, or refilled by churn,
        falls and rises again, and a taker that cannot take keeps it from ever clearing."""
        if surplus > 0:
            self.surplus_seen_mono = now
        if deficit <= 0:
            self.deficit_low = None
        elif self.deficit_low is None or deficit < self.deficit_low:
            self.deficit_low, self.deficit_fell_mono = deficit, now
        self.deficit, self.surplus = deficit, surplus

    def recount(self, total: int, live: int) -> None:
        """Take a new count of the fleet: ``total`` streams over ``live`` workers."""
        floor = total // max(1, live)
        if live > self.live_workers:
            self.deficit_low = None  # workers joined: what they lack is a new rebalance
        last = self._last_floor
        self.taking_share = floor if last is None else min(floor, last)
        self._last_floor = floor
        self.total_streams, self.live_workers = total, live
        self.share = rules.fair_share(total, live)

    @property
    def fill_line(self) -> int:
        """What takers fill up to: :attr:`share` when :attr:`fill_to_share`, else
        :attr:`taking_share`."""
        return self.share if self.fill_to_share else self.taking_share

    def holds_off(self, now: float, rebalance_seconds: float) -> bool:
        """Whether a worker that lacks nothing stays out of the command queue
        (:func:`streamlease.rules.may_take_more`): the fleet rebalances by counts (with load
        figures the takers are the workers below the mean load, who poll anyway), some workers
        lack streams below :attr:`fill_line`, a worker was above share + slack within the last
        rounds its givers go on shedding (:data:`~streamlease.placement.SHED_SETTLE_ROUNDS`
        + 1), and the deficit reached a new low within the last :data:`HOLD_OFF_ROUNDS`. Not
        after a death: the dead worker's streams count into the share, and no live worker is
        above it."""
        if self.load is not None or self.deficit <= 0:
            return False
        shedding = (placement.SHED_SETTLE_ROUNDS + 1) * rebalance_seconds
        patience = HOLD_OFF_ROUNDS * rebalance_seconds
        return now - self.surplus_seen_mono < shedding and now - self.deficit_fell_mono < patience

    @property
    def shedding(self) -> bool:
        """This worker sheds: on down to the share (:func:`streamlease.placement.giver_slack`),
        and in a large fleet it reads the digest every round meanwhile
        (:func:`worker.liveness.fleet.digest_due`)."""
        return self.shed_idle_rounds is not None


def sharing_peers(workers: Sequence[WorkerInfo], me: str, dead: frozenset[str]) -> list[WorkerInfo]:
    """The other workers that have a part in the fair share: RUNNING, not judged ``dead``, and
    advertising room (``capacity`` above 0).

    A per-stream worker whose lease renewals go unanswered takes no streams and advertises a
    capacity of 0 on its item's renewal (architecture §4b): counting it would keep the share too
    small for the peers that take its streams, and they would shed them again. When every one
    of at least two running peers advertises no room at once, the store fails for the fleet
    rather than for them: they all count, so the first worker to recover does not take
    everything.
    """
    running = [
        w
        for w in workers
        if w.worker_id != me and w.state is WorkerState.RUNNING and w.worker_id not in dead
    ]
    with_room = [w for w in running if w.capacity > 0]
    if not with_room and len(running) >= 2:
        return running
    return with_room


def count_fleet(
    workers: Sequence[WorkerInfo], me: str, held: int, orphans: int, dead: frozenset[str]
) -> tuple[int, int]:
    """``(streams owned or wanted, live workers)`` from the worker items.

    Streams: this worker's ``held`` + every other live or draining session's
    ``active_streams`` (the streams of a draining or dead worker, or of one advertising no room,
    need a new home too) + ``orphans``. Live workers: this one + :func:`sharing_peers`.
    """
    others = [w for w in workers if w.worker_id != me and (w.is_live or w.active_streams)]
    total = held + orphans + sum(max(0, w.active_streams) for w in others)
    return total, 1 + len(sharing_peers(workers, me, dead))


def update_view(
    view: FleetView,
    workers: Sequence[WorkerInfo],
    me: str,
    held: int,
    dead: frozenset[str] = frozenset(),
    my_load: float | None = None,
    slack: int = 1,
    capacity: int | None = None,
) -> None:
    """Recount ``view`` from the worker items (orphans as last seen by the reconciler);
    ``my_load``: this worker's own load (None: not measured), ``slack``: the rebalance slack
    (streams), ``capacity``: this worker's own (None: no limit). A worker's lack counts up to
    its capacity only: what it has no room for, no worker waits for it to take."""
    total, live = count_fleet(workers, me, held, view.orphans, dead)
    peers = sharing_peers(workers, me, dead)
    view.recount(total, live)
    counts = [held, *(max(0, w.active_streams) for w in peers)]
    rooms = [view.share if capacity is None else capacity, *(w.capacity for w in peers)]
    surplus = sum(c - view.share for c in counts if c > view.share + slack)

    def lack(line: int) -> int:
        return sum(max(0, min(line, room) - c) for c, room in zip(counts, rooms, strict=True))

    deficit = lack(view.taking_share)
    view.fill_to_share = deficit == 0 and surplus > 0
    if view.fill_to_share:
        deficit = lack(view.share)
    view.note_balance(deficit, surplus, time.monotonic())
    view.load = placement.fleet_load([my_load, *(w.load for w in peers)])
    view.updated_mono = time.monotonic()


def wants_handoffs(view: FleetView, held: int, my_load: float | None) -> bool:
    """Whether a rebalance handoff is for this worker: below the fleet's mean load when load
    figures exist (for the fleet and this worker), else below its taking share by counts
    (:attr:`FleetView.taking_share`)."""
    if view.load is not None and my_load is not None:
        return placement.takes_by_load(my_load, view.load)
    return held < view.fill_line


def view_from_digest(view: FleetView, digest: FleetDigest) -> None:
    """Take the fair share from the fleet digest (a large fleet: the elected watcher counted
    it with :func:`update_view` from every session item; orphans as this worker last saw them
    come on top)."""
    view.recount(digest.total_streams + view.orphans, max(1, digest.live_workers))
    view.fill_to_share = digest.fill_to_share
    view.note_balance(digest.deficit, digest.surplus, time.monotonic())
    view.load = digest.load
    view.updated_mono = time.monotonic()


def check_fleet_mode(workers: Sequence[WorkerInfo], mine: Liveness, now_ms: int) -> None:
    """Refuse to join a fleet that runs the other liveness mode (a rolling deploy must never
    mix them). Raises :class:`ConfigError` naming both modes; sessions whose expiry has passed
    by the wall clock do not count (they are dead or about to be judged so)."""
    others = sorted(
        {
            w.worker_id
            for w in workers
            if w.is_live and w.liveness is not mine and w.expires_at_ms > now_ms
        }
    )
    if others:
        raise ConfigError(
            f"this worker runs STREAMLEASE_LIVENESS={mine.value} but live workers run "
            f"{'stream' if mine is Liveness.SESSION else 'session'} ({', '.join(others[:3])}"
            f"{', ...' if len(others) > 3 else ''}); a fleet runs one mode: stop the old fleet "
            "first, then start the new one"
        )
