"""The rebalance section: how many streams move when a worker joins, and where they go.

A fleet holds N streams; once every stream has been held past the minimum tenure (so any of
them may be shed), one empty worker joins, and the fleet rebalances. That is one scale-out
event; the section runs several in a row (2 → 3 → 4 workers, ...) on one testbed. Nothing else
happens meanwhile (no kill, no stop), so every release after the join is a rebalance move; the
stream's next acquisition says where it went.

The least a scale-out can move is the *excess over fair share*: what the workers that were there
hold above ``ceil(N / workers after the join)``. A move to the new worker is useful; a move to a
worker that was already there is a wasted handover (it reduces no imbalance). The slack (a
worker sheds only above share + slack) means fewer moves than the excess is normal; more is not.
An event is over once no stream has moved for :data:`QUIET_ROUNDS` rebalance intervals.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from bench.common import Table, timers_label
from bench.context import PRESET_LABELS, SESSIONS, BenchContext
from bench.failover_rounds import round_timeout
from local.testbed import Testbed
from streamlease.lease_events import LeaseEvent, LeaseEventKind
from streamlease.rules import fair_share
from streamlease.schema import belongs_to_task
from streamlease.settings import Settings

QUIET_ROUNDS: Final = 3
"""An event is over after this many rebalance intervals without a move."""
RATE: Final = 2.0
"""Messages per second per stream (the streams only need to be alive)."""


@dataclass(frozen=True)
class Move:
    """One stream handed from one worker to another."""

    stream_id: str
    from_worker: str
    to_worker: str
    released_mono: float
    acquired_mono: float


@dataclass(frozen=True)
class ScaleOut:
    """One worker joining: what the fleet held before, and what moved."""

    workers_before: int
    held_before: dict[str, int]
    """Worker id → streams held just before the join (the workers that were there)."""
    new_worker: str
    joined_mono: float
    moves: list[Move]

    @property
    def streams(self) -> int:
        return sum(self.held_before.values())

    @property
    def excess(self) -> int:
        """The least that must move: what the old workers hold above the new fair share."""
        return excess_over_share(self.held_before.values(), self.workers_before + 1)

    @property
    def to_new(self) -> int:
        """Moves to the worker that joined (any of its sessions)."""
        return sum(1 for m in self.moves if belongs_to_task(m.to_worker, self.new_worker))

    @property
    def settled_seconds(self) -> float:
        """Join → the last move's acquisition (0: nothing moved)."""
        return max((m.acquired_mono - self.joined_mono for m in self.moves), default=0.0)


def excess_over_share(held: Iterable[int], workers: int) -> int:
    """What ``held`` (per worker) holds above ``ceil(total / workers)``, summed."""
    counts = list(held)
    share = fair_share(sum(counts), workers)
    return sum(max(0, n - share) for n in counts)


def _pairs(
    events: Iterable[LeaseEvent], after_mono: float
) -> list[tuple[LeaseEvent, LeaseEvent | None]]:
    """Every release at or after ``after_mono``, in the order released, with the acquisition
    that followed it: the same stream's lowest epoch above the released one (the epoch, not
    the clock: a peer may log its acquisition before the releaser logs the answer to its
    release). None: nobody acquired it (yet)."""
    acquisitions: dict[str, list[LeaseEvent]] = {}
    releases = []
    for e in events:
        if e.event == LeaseEventKind.ACQUIRED:
            acquisitions.setdefault(e.stream_id, []).append(e)
        elif e.event == LeaseEventKind.RELEASED and e.mono >= after_mono:
            releases.append(e)
    out = []
    for released in sorted(releases, key=lambda e: e.mono):
        later = [a for a in acquisitions.get(released.stream_id, []) if a.epoch > released.epoch]
        out.append((released, min(later, key=lambda a: a.epoch) if later else None))
    return out


def moves_after(events: Iterable[LeaseEvent], after_mono: float) -> list[Move]:
    """Every release at or after ``after_mono`` whose stream another worker acquired next, in
    the order released. A release nobody followed up (yet), or one its own worker took back,
    is not a move."""
    return [
        Move(
            released.stream_id,
            released.worker_id,
            acquired.worker_id,
            released.mono,
            acquired.mono,
        )
        for released, acquired in _pairs(events, after_mono)
        if acquired is not None and acquired.worker_id != released.worker_id
    ]


def _settle(bed: Testbed, settings: Settings, since_mono: float, timeout: float) -> None:
    """Wait until no stream has moved for :data:`QUIET_ROUNDS` rebalance intervals since
    ``since_mono`` (a release still without its acquisition is not quiet). Raises
    ``TimeoutError`` after ``timeout`` seconds."""
    quiet = QUIET_ROUNDS * settings.rebalance_seconds * 1.2  # the interval is jittered ± 20 %

    def quiet_now() -> bool:
        bed.tail.refresh()
        pairs = _pairs(bed.tail.events, since_mono)
        if any(acquired is None for _, acquired in pairs):
            return False
        last = max((a.mono for _, a in pairs if a is not None), default=since_mono)
        return time.monotonic() - max(last, since_mono) >= quiet

    bed.wait_for(quiet_now, timeout, "the fleet settled", every=settings.rebalance_seconds / 4)


def _wait_tenure(bed: Testbed, settings: Settings) -> None:
    """Sleep until every stream has been held for the minimum tenure (any may then be shed)."""
    bed.tail.refresh()
    newest = max((e.mono for e in bed.tail.events if e.event == LeaseEventKind.ACQUIRED), default=0)
    time.sleep(max(0.0, newest + settings.min_tenure_seconds - time.monotonic()))


def scale_out(bed: Testbed, settings: Settings, timeout: float) -> ScaleOut:
    """One worker joins the fleet of ``bed`` once every stream may be shed; returns what moved
    until the fleet settled."""
    _wait_tenure(bed, settings)
    live = {w.worker_id for w in bed.live_workers()}
    held_before = {
        worker: len(streams)
        for worker, streams in bed.holdings().items()
        if streams or worker in live
    }
    joined = time.monotonic()
    new = bed.add_worker()
    bed.wait_worker_running(new, timeout)
    if not new.alive:
        raise RuntimeError(f"the joining worker exited\n{bed.diagnosis()}")
    _settle(bed, settings, time.monotonic(), timeout)
    bed.tail.refresh()
    moves = moves_after(bed.tail.events, joined)
    return ScaleOut(len(live), held_before, new.worker_id, joined, moves)


def measure(ctx: BenchContext, workers: int, joins: int, streams: int) -> list[ScaleOut]:
    """``workers`` workers hold ``streams`` streams; then ``joins`` workers join, one at a time."""
    settings = ctx.settings(SESSIONS)
    timeout = round_timeout(settings) + 20 * settings.rebalance_seconds
    with ctx.testbed("rebalance", settings, rate=RATE) as bed:
        for _ in range(workers):
            bed.add_worker()
        ids = bed.create_streams(streams)
        bed.wait_all_owned(ids, timeout)
        ctx.progress.update("waiting out the minimum tenure", force=True)
        _wait_tenure(bed, settings)
        _settle(bed, settings, time.monotonic(), timeout)  # an uneven start evens out first
        out = []
        for n in range(joins):
            ctx.progress.update(
                f"worker {workers + n + 1} joins {workers + n} ({streams} streams)", force=True
            )
            out.append(scale_out(bed, settings, timeout))
        violations = bed.report().violations()
    if violations:
        raise RuntimeError(f"invariants broken during rebalancing: {violations[:3]}")
    return out


def run(ctx: BenchContext) -> list[Table]:
    """The rebalance section (sessions; per-stream rebalances the same way)."""
    streams, joins = (12, 1) if ctx.quick else (40, 3)
    events = measure(ctx, 2, joins, streams)
    defaults = Settings()
    table = Table(
        f"Rebalance: moves per scale-out event ({PRESET_LABELS[SESSIONS]},"
        f" {timers_label(ctx.scale)}: rebalance every {defaults.rebalance_seconds * ctx.scale:g} s,"
        f" minimum tenure {defaults.min_tenure_seconds * ctx.scale:g} s,"
        f" lease {ctx.lease_seconds:g} s)",
        [
            "event",
            "held before",
            "excess over fair share",
            "moves",
            "to the new worker",
            "to others (wasted)",
            "settled after s",
        ],
    )
    for event in events:
        table.add(
            f"{event.workers_before} → {event.workers_before + 1} workers, {event.streams} streams",
            " / ".join(str(n) for n in sorted(event.held_before.values(), reverse=True)),
            event.excess,
            len(event.moves),
            event.to_new,
            len(event.moves) - event.to_new,
            event.settled_seconds,
        )
    table.notes += [
        "Excess over fair share: what the workers already there held above ceil(streams /"
        " workers after the join), the least a rebalance must move to reach fair shares. With"
        f" slack {defaults.rebalance_slack} a worker at share + {defaults.rebalance_slack} keeps"
        " its streams, so fewer moves than the excess is expected; more would be waste.",
        f"A worker sheds at most {defaults.shed_batch} streams per round, only to workers below"
        " their share (rebalance handoffs are passed on by the others); settled after: the join"
        f" → the last move's acquisition (the event ends after {QUIET_ROUNDS} quiet rounds).",
    ]
    return [table]
