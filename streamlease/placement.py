"""Pure placement rules: what a stream costs, who should hold more, what to hand off.

Functions of numbers only (no I/O, no clock reads), shared by the worker and the fleet model.

**Load** is what a stream costs its holder, in *load units per second*: its messages per
second plus its kibibytes per second (:func:`stream_load`), each a decayed average
(:class:`DecayedRate`). A worker's load is the sum over the streams it holds; it publishes it
on its session renewal, a write it sends anyway (architecture §10).

**Placement.** When load figures exist for the whole fleet (:class:`FleetLoad`), a worker
takes handed-off streams while its load is below the fleet's mean, and one above the mean +
slack hands off the streams that close its gap in the fewest moves (:func:`choose_by_load`).
Without them, counts decide (:func:`count_to_shed`). Either way a worker sheds no more than
its part of what the workers below the mark can take, so a round never herds, and every
stream moved is held at least the minimum tenure before it can move again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

BYTES_PER_LOAD_UNIT: Final = 1024
"""A stream's kibibyte per second costs its holder about what one message per second does."""
LOAD_HALF_LIFE_SECONDS: Final = 30.0
"""Half-life of the decayed rates: a burst counts for about a minute, a change of pace is
seen within one or two rebalance rounds."""
LOAD_SLACK_FRACTION: Final = 0.1
"""A worker sheds by load once it is more than this fraction above the fleet's mean."""
MIN_FLEET_LOAD: Final = 1.0
"""Below this much load in the whole fleet (load units per second) load says nothing: counts
decide."""
MAX_SHED_FRACTION: Final = 0.025
"""At most this fraction of a worker's capacity (in streams) is handed off in one round (5 s):
the receivers connect that many upstreams at once, not the whole excess of a large worker,
and the few takers of a small scale-out are not sent more than they take."""


SPREAD_FRACTION: Final = 0.5
"""A round's handoffs are spread over this fraction of the rebalance interval, not sent at
once: the orphan index and the receivers' partitions see a steady trickle, never a burst."""


PARTITION_WRITE_UNITS: Final = 1000
"""Write units a second one DynamoDB partition takes before it throttles."""
MOVES_INDEX_SHARE: Final = 0.15
"""The fleet's handoffs together use at most this fraction of the orphan index's write
capacity: its partitions stay far from throttling with the takeovers and starts beside them."""
ORPHAN_WRITES_PER_MOVE: Final = 2
"""A handoff writes the orphan index twice: the released stream enters it, its taker's
acquire removes it."""
MOVES_TABLE_SHARE: Final = 0.24
"""The fleet's handoffs together use at most this fraction of the write units a second the
lease table can take at once (its warm throughput). The moves' writes do not spread evenly:
a taker's acquires and connection states all fall on its own ``by-holder`` partition, and a
scale-out's few new workers share few partitions; at this pace the busiest stays under half
its limit (the fleet model's scale-out of 1,000 × 1,000, ``bench/results/fleet_model.md``)."""
TABLE_WRITES_PER_MOVE: Final = 3
"""A handoff writes the table three times (the giver's release, the taker's acquire, its
connection state), and ``by-holder`` as often."""


TAKES_PER_SECOND: Final = 50.0
"""Most rebalance handoffs one worker takes a second. A taker's acquires and connection states
all land on its own ``by-holder`` partition (two writes a take): at this pace a tenth of that
partition's limit, so the few takers of a small scale-out that share a partition (with the
givers' releases beside them) stay under half of it, whatever the fleet's pace; and a worker
opens no more upstream connections a second than that."""


def take_delay(next_take: float, now: float) -> tuple[float, float]:
    """Pacing a taker's rebalance handoffs at :data:`TAKES_PER_SECOND`: ``(seconds to wait
    before this take, when the next one may start)`` given when this one may start
    (``next_take``, monotonic seconds) and ``now``."""
    start = max(next_take, now)
    return start - now, start + 1.0 / TAKES_PER_SECOND


def fleet_moves_per_second(orphan_shards: int, table_write_units: float) -> float:
    """How many handoffs a second the whole fleet may send: the lower of two budgets.

    - the orphan index's: :data:`MOVES_INDEX_SHARE` of ``orphan_shards`` partitions' write
      units, two writes a move (76,800 over 1,024 shards; 75 for a per-stream fleet's one);
    - the table's: :data:`MOVES_TABLE_SHARE` of ``table_write_units`` (write units a second
      the table and its indexes take at once, :mod:`streamlease.table_capacity`), three
      writes a move: 320 on a new on-demand table (4,000), 3,200 at 40,000, 6,400 at 80,000.
    """
    orphans = orphan_shards * PARTITION_WRITE_UNITS * MOVES_INDEX_SHARE / ORPHAN_WRITES_PER_MOVE
    table = max(0.0, table_write_units) * MOVES_TABLE_SHARE / TABLE_WRITES_PER_MOVE
    return min(orphans, table)


def paced_cap(
    cap: int,
    mine: float,
    surplus: float,
    rebalance_seconds: float,
    moves_per_second: float,
) -> int:
    """Most handoffs one giver sends this round so the fleet's together stay within
    ``moves_per_second`` (:func:`fleet_moves_per_second`) on average: its part (``mine`` over
    the fleet's ``surplus``, in streams or load units alike) of what the fleet may send in one
    round; at most ``cap``, at least one. A paced giver spreads its moves over the whole round
    (:func:`shed_spacing_seconds`), so the fleet's moves come at about that pace. A small fleet
    never meets the pace (its ``cap`` binds); a scale-out of a thousand workers does, and its
    moves trickle over a few rounds instead of throttling the table or the orphan index."""
    if mine <= 0 or surplus <= 0:
        return cap
    part = min(1.0, mine / max(surplus, mine))
    allowed = moves_per_second * rebalance_seconds * part
    return max(1, min(cap, math.floor(allowed)))


def shed_spacing_seconds(moves: int, rebalance_seconds: float, *, paced: bool = False) -> float:
    """The pause between two handoffs of one round of ``moves``: spread over
    :data:`SPREAD_FRACTION` of the round, or over all of it when :func:`paced_cap` bound the
    round (``paced``): the givers of a large scale-out learn of it from one digest and start
    their rounds nearly together, and moves spread over half a round come in waves of twice
    the pace."""
    if moves <= 1:
        return 0.0
    return (1.0 if paced else SPREAD_FRACTION) * rebalance_seconds / moves


class DecayedRate:
    """An exponentially decayed event rate (events per second), with time as an input.

    Every event counts with weight ``2^(-age / half_life)``; the rate is the weighted count
    over the weighted time observed, so a rate is right from the first seconds rather than
    climbing from zero over a half-life (the bias correction of a moving average started at
    ``since``).
    """

    __slots__ = ("_at", "_decay", "_since", "_weight")

    def __init__(self, half_life_seconds: float, since: float, initial: float = 0.0) -> None:
        """``since``: when counting starts (any monotonic seconds); ``initial``: a rate known
        from elsewhere (a handoff), counted as if observed for one half-life before ``since``."""
        if half_life_seconds <= 0:
            raise ValueError("half_life_seconds must be > 0")
        self._decay = math.log(2) / half_life_seconds
        self._since = since
        self._at = since
        self._weight = 0.0
        if initial > 0:
            self._since = since - half_life_seconds
            self._weight = initial * (1 - 0.5) / self._decay

    def add(self, count: float, now: float) -> None:
        """``count`` events at ``now`` (seconds; earlier times are taken as the last one)."""
        self._advance(now)
        self._weight += count

    def rate(self, now: float) -> float:
        """Events per second as of ``now``; 0.0 before any time has passed."""
        self._advance(now)
        observed = (1 - math.exp(-self._decay * (self._at - self._since))) / self._decay
        return 0.0 if observed <= 0 else self._weight / observed

    def _advance(self, now: float) -> None:
        if now > self._at:
            self._weight *= math.exp(-self._decay * (now - self._at))
            self._at = now


def stream_load(messages_per_second: float, bytes_per_second: float) -> float:
    """A stream's load (load units per second): messages/s + KiB/s."""
    return max(0.0, messages_per_second) + max(0.0, bytes_per_second) / BYTES_PER_LOAD_UNIT


@dataclass(frozen=True)
class FleetLoad:
    """The fleet's load as one worker counts it (load units per second)."""

    mean: float
    """Load per worker that has a part in the share."""
    room: float
    """What the workers below the mean lack to reach it (what shedding fills)."""
    surplus: float
    """What the workers above the mean + slack carry beyond the mean (what shedding empties)."""

    @property
    def slack(self) -> float:
        """How far above the mean a worker may be before it sheds."""
        return load_slack(self.mean)


def load_slack(mean: float) -> float:
    """The hysteresis band above the mean load: :data:`LOAD_SLACK_FRACTION` of it."""
    return LOAD_SLACK_FRACTION * mean


def fleet_load(loads: Iterable[float | None]) -> FleetLoad | None:
    """The fleet's load from every sharing worker's published load (this one's included), or
    None when any of them has not published one yet or the fleet carries less than
    :data:`MIN_FLEET_LOAD`: then counts decide."""
    known = list(loads)
    if not known or any(x is None for x in known):
        return None
    values = [max(0.0, float(x)) for x in known if x is not None]
    total = sum(values)
    if total < MIN_FLEET_LOAD:
        return None
    mean = total / len(values)
    slack = load_slack(mean)
    return FleetLoad(
        mean=mean,
        room=sum(mean - x for x in values if x < mean),
        surplus=sum(x - mean for x in values if x > mean + slack),
    )


def my_part(room: float, mine: float, surplus: float) -> float:
    """The part of ``room`` (what receivers can take) that one giver with ``mine`` of the
    fleet's ``surplus`` fills this round: proportional, so all givers together fill the room
    once rather than each filling it whole."""
    if room <= 0 or mine <= 0:
        return 0.0
    return room * min(1.0, mine / max(surplus, mine))


def round_cap(capacity: int, floor: int) -> int:
    """Most streams one worker hands off in one round: :data:`MAX_SHED_FRACTION` of its
    capacity, at least ``floor`` (the configured batch)."""
    return max(floor, math.floor(MAX_SHED_FRACTION * capacity))


SHED_SETTLE_ROUNDS: Final = 3
"""A giver's shedding ends after this many rebalance rounds in a row that moved nothing."""


def giver_slack(slack: int, shedding: bool) -> int:
    """The slack :func:`count_to_shed` allows a giver this round: ``slack`` to start shedding,
    none while it sheds (:func:`shed_rounds_idle`). A worker starts only once it holds more
    than share + slack, so a share that the digest counts a stream high or low moves nothing;
    once started it goes on down to the share, and the last givers of a scale-out do not rest
    at share + slack on a recount that was a stream off."""
    return 0 if shedding else slack


def shed_rounds_idle(idle: int | None, moved: int) -> int | None:
    """A giver's shedding after a rebalance round that ``moved`` streams: ``idle`` is how many
    rounds in a row moved nothing since it started, None when it is not shedding. A move
    (re)starts it at 0; it ends after :data:`SHED_SETTLE_ROUNDS` idle rounds, not at the first:
    while streams move fast the digest counts some twice and its share reads a few streams
    high for a round or two, and a giver that stopped on such a share would rest above the
    share it learns of next."""
    if moved > 0:
        return 0
    if idle is None or idle + 1 >= SHED_SETTLE_ROUNDS:
        return None
    return idle + 1


def count_to_shed(
    held: int, share: int, slack: int, room_elsewhere: int, surplus: int, cap: int
) -> int:
    """How many streams a worker holding ``held`` hands off this round, by counts.

    Nothing until it holds more than ``share + slack``; then its excess over ``share``, at most
    its part of ``room_elsewhere`` (what the workers below the share lack; ``surplus`` is what
    every worker above share + slack holds beyond the share, its own excess included) and at
    most ``cap``. The excess goes in as few rounds as receivers can take it: a scale-out
    converges in a round or two instead of a few streams per round.
    """
    if held <= share + slack:
        return 0
    excess = held - share
    part = math.ceil(my_part(float(room_elsewhere), float(excess), float(surplus)))
    return max(0, min(excess, part, cap))


def choose_by_load(
    streams: Sequence[tuple[str, float]], my_load: float, fleet: FleetLoad, max_moves: int
) -> list[str]:
    """Which of ``streams`` (``(stream id, load)``, those past their tenure) to hand off this
    round by load.

    Nothing while ``my_load`` is within the mean + slack. Above it, the gap to close is the
    excess over the mean, at most this worker's part of the receivers' room. The heaviest
    streams that fit in what is left of the gap go first, so it closes in few moves. A stream
    may overshoot what is left by up to the slack, as a receiver takes it up to the mean + slack
    (:func:`takes_by_load`): a heavy stream that barely misses the gap on figures a few seconds
    old still moves, instead of light ones going first and leaving it stranded. Never a stream
    heavier than what is left of this worker's excess over the mean: a move from a worker above
    the mean to one below then always lowers the sum of the squared loads, so no sequence of
    moves can come back to where it started (a stream heavier than the excess, once taken by a
    worker just below the mean, would put it above mean + slack, and it would hand the stream
    back). A stream heavier than that stays. At most ``max_moves``.
    """
    excess = my_load - fleet.mean
    if excess <= fleet.slack or max_moves <= 0:
        return []
    gap = min(excess, my_part(fleet.room, excess, fleet.surplus))
    chosen: list[str] = []
    for stream_id, load in sorted(streams, key=lambda s: (-s[1], s[0])):
        if len(chosen) >= max_moves or gap <= 0:
            break
        if 0 < load <= min(gap + fleet.slack, excess):
            chosen.append(stream_id)
            gap -= load
            excess -= load
    return chosen


def takes_by_load(my_load: float, fleet: FleetLoad, stream: float = 0.0) -> bool:
    """Whether a worker carrying ``my_load`` takes a handed-off stream of load ``stream``: it
    is below the mean and stays within the mean + slack with it (a worker at the mark passes
    it on to one below)."""
    return my_load < fleet.mean and my_load + stream <= fleet.mean + fleet.slack


def spare(load: float, fleet: FleetLoad) -> float:
    """How much more load a worker may take before it reaches the mean (0 at or above)."""
    return max(0.0, fleet.mean - load)


def most_spare(workers: Sequence[tuple[str, float, int]]) -> str | None:
    """Placement of one free stream: the worker with the least load among ``(worker id,
    load, streams held)``, ties to the one holding fewest streams, then by id."""
    if not workers:
        return None
    return min(workers, key=lambda w: (w[1], w[2], w[0]))[0]
