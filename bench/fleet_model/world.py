"""The simulated world: a clock and its events, the streams, the orphan index, the command queue,
and requests to the store model with botocore's retries.

Streams are numbered ``0 .. M-1``; ``owner[s]`` is the worker index holding stream ``s`` (-1:
free). A stream whose owner's process is dead (killed) or whose session is a tombstone is
*unowned* as far as users are concerned: :attr:`World.unowned` counts free streams and streams of
dead holders, and :attr:`World.unowned_series` records it at every change.

A write's condition is decided and its effect applied at the moment the store admits it (the
server's order is the admission order); its answer reaches the caller a round trip later.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from bench.fleet_model.events import Answer, Request, Sim
from bench.fleet_model.sessions import Fleet, Holder
from bench.fleet_model.store import TABLE, Store, Touch
from bench.fleet_model.units import Units
from streamlease import placement
from streamlease.placement import PARTITION_WRITE_UNITS
from streamlease.settings import Settings
from worker.liveness.fleet import DIGEST_READ_ROUNDS
from worker.ownership.fleet_view import FleetView

AgentT = TypeVar("AgentT", bound=Holder)
"""The model's worker (:class:`~bench.fleet_model.agents.Agent`), which the world only registers,
wakes and counts."""


@dataclass
class Digest(Generic[AgentT]):
    """The fleet digest item: who writes it, until when, and the view it publishes."""

    writer: AgentT | None = None
    expires_at: float = -math.inf
    view: FleetView = field(default_factory=FleetView)


RTT_SECONDS: Final = (0.004, 0.012)
"""A DynamoDB round trip, uniform in this range (same-region requests)."""
SQS_SECONDS: Final = 0.02
"""From a send (or a message made visible) to a waiting long poll's answer."""
MAX_ATTEMPTS: Final = 3
"""botocore's standard retry mode: 3 attempts, full-jitter backoff 1 s, 2 s, ... (max 20 s)."""
ORDER_BUCKETS: Final = 256
"""Index order among entries with the same key (free streams all have expiry 0): streams are
grouped in this many buckets by key hash, read bucket by bucket; every reader of a partition
sees the same first entries, as in DynamoDB, so reconcilers contend for them."""


@dataclass(frozen=True)
class Design:
    """One protocol layout, as the model plays it."""

    key: str
    label: str
    orphan_index: str
    """Index name of the orphan index (written when a stream becomes free or stops being so)."""
    orphan_shards: int
    """Partition key values the orphan index spreads free streams over (1: all on one)."""
    ring_watch: bool
    """Liveness watched by a bounded ring of peers (else everyone reads the whole fleet)."""
    units: Units
    owner_index: str = "by-owner"
    """Index name of what each owner holds (partition key: the owner)."""
    settle_seconds: float = 0.0
    """A sweep out of room waits this long once, re-reading the fair share, before it frees."""
    moves_per_second: float | None = None
    """The fleet's handoff budget (:func:`streamlease.placement.paced_cap`); None: the
    worker's rule (:func:`streamlease.placement.fleet_moves_per_second` of the orphan shards
    and of the write units the store's partitions take)."""
    digest_read_rounds: int = DIGEST_READ_ROUNDS
    """A worker of a large fleet reads the digest every this many fleet rounds."""


def stream_hash(s: int) -> int:
    """A stream id's key hash (a multiplicative hash: neighbours land far apart)."""
    return (s * 2654435761) & 0xFFFFFFFF


def text_hash(text: str) -> int:
    """A string key's hash."""
    return zlib.crc32(text.encode())


class FreeIndex:
    """Free streams by orphan-index shard, in index order (see :data:`ORDER_BUCKETS`)."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self._buckets = [[set[int]() for _ in range(ORDER_BUCKETS)] for _ in range(shards)]
        self._counts = [0] * shards

    def shard_of(self, s: int) -> int:
        """The shard stream ``s`` is written to when free."""
        return (stream_hash(s) >> 8) % self.shards

    def add(self, s: int) -> None:
        """``s`` became free."""
        k = self.shard_of(s)
        bucket = self._buckets[k][stream_hash(s) % ORDER_BUCKETS]
        if s not in bucket:
            bucket.add(s)
            self._counts[k] += 1

    def discard(self, s: int) -> None:
        """``s`` is no longer free."""
        k = self.shard_of(s)
        bucket = self._buckets[k][stream_hash(s) % ORDER_BUCKETS]
        if s in bucket:
            bucket.remove(s)
            self._counts[k] -= 1

    def count(self, shards: Iterable[int] | None = None) -> int:
        """Free streams in ``shards`` (all by default)."""
        return sum(self._counts) if shards is None else sum(self._counts[k] for k in shards)

    def first(self, shards: Iterable[int], limit: int) -> list[int]:
        """The first ``limit`` free streams of ``shards`` in index order."""
        out: list[int] = []
        for k in shards:
            if not self._counts[k]:
                continue
            for bucket in self._buckets[k]:
                if bucket:
                    out.extend(itertools.islice(bucket, limit - len(out)))
                    if len(out) >= limit:
                        return out
        return out


class World(Generic[AgentT]):
    """Everything the agents share: clock, store, streams, free index, queue, the fleet."""

    def __init__(
        self,
        design: Design,
        settings: Settings,
        *,
        streams: int,
        table_partitions: int,
        index_partitions: int,
        seed: int,
    ) -> None:
        self.design = design
        self.units = design.units
        self.settings = settings
        self.sim = Sim()
        self.rng = random.Random(seed)
        self.store = Store(table_partitions, index_partitions)
        self.owner = [-1] * streams
        self.acquired_at = [0.0] * streams
        self.rate: list[float] | None = None
        """Each stream's load (load units per second), as its holder measures it; None: no
        load figures (counts decide)."""
        self.free = FreeIndex(design.orphan_shards)
        self.agents: list[AgentT] = []
        self.fleet = Fleet()
        self.digest: Digest[AgentT] = Digest()
        self.cache: dict[str, Any] = {}
        """Per-second figures several agents share (see :func:`watch.whole_fleet_view`)."""
        self.queue: deque[tuple[int, bool, int]] = deque()
        """Handoff commands: ``(stream, rebalance, times received so far)``."""
        self.rebalance_handoffs: list[float] = []
        """When each rebalance handoff was sent (seconds)."""
        self.waiting: list[AgentT] = []
        self.unowned = 0
        self.unowned_series: list[tuple[float, int]] = [(0.0, 0)]
        self.released_at: dict[int, float] = {}
        """When each stream released and not yet taken again was released (seconds)."""
        self.handoff_gaps: list[tuple[float, float]] = []
        """``(when it was taken, seconds it was unowned)`` of every released stream taken again."""
        self._orphan_parts = [
            self.store.index_partition(text_hash(f"STARTED#{k}")) for k in range(self.free.shards)
        ]
        self._fleet_part = self.store.index_partition(text_hash("WORKER"))
        self._owner_parts: dict[str, int] = {}

    # --- accounting --------------------------------------------------------------------------

    def add_unowned(self, delta: int) -> None:
        """Streams became unowned (+) or owned again (-)."""
        if delta:
            self.unowned += delta
            self.unowned_series.append((self.sim.now, self.unowned))

    def is_free(self, s: int) -> bool:
        """Stream ``s`` has no owner (an acquire's condition)."""
        return self.owner[s] == -1

    def live_agents(self) -> list[AgentT]:
        """Agents whose process runs."""
        return [a for a in self.agents if a.alive]

    @property
    def moves_per_second(self) -> float:
        """The fleet's handoff budget: the design's, else the worker's rule for a table whose
        warm throughput is what its partitions take (the fewer of the table's and an index's)."""
        if self.design.moves_per_second is not None:
            return self.design.moves_per_second
        store = self.store
        units = min(store.table_partitions, store.index_partitions) * PARTITION_WRITE_UNITS
        return placement.fleet_moves_per_second(self.design.orphan_shards, units)

    # --- partitions --------------------------------------------------------------------------

    def stream_touch(self, s: int, units: float) -> Touch:
        """``units`` written to stream ``s``'s item."""
        return Touch(TABLE, self.store.table_partition(stream_hash(s)), True, units)

    def key_touch(self, key: str, units: float, *, write: bool) -> Touch:
        """``units`` to the item with key ``key`` (a session, the digest)."""
        return Touch(TABLE, self.store.table_partition(text_hash(key)), write, units)

    def owner_touch(self, session: str, units: float, *, write: bool = True) -> Touch:
        """``units`` on ``by-owner``'s partition of ``session``."""
        part = self._owner_parts.get(session)
        if part is None:
            part = self._owner_parts[session] = self.store.index_partition(text_hash(session))
        return Touch(self.design.owner_index, part, write, units)

    def orphan_touch(self, s: int, units: float) -> Touch:
        """``units`` written to the orphan index's partition of stream ``s``."""
        part = self._orphan_parts[self.free.shard_of(s)]
        return Touch(self.design.orphan_index, part, True, units)

    def orphan_read(self, shards: list[int], units: float) -> list[Touch]:
        """A read of ``units`` spread over the orphan index partitions of ``shards``."""
        each = units / max(1, len(shards))
        parts = {self._orphan_parts[k] for k in shards}
        return [Touch(self.design.orphan_index, p, False, each) for p in parts]

    def fleet_touch(self, units: float, *, write: bool) -> Touch:
        """``units`` on the fleet index (one partition key value: every worker item)."""
        return Touch("fleet", self._fleet_part, write, units)

    def write_touches(
        self, cost: Mapping[str, float], s: int, old: str | None, new: str | None
    ) -> list[Touch]:
        """The touches of a stream write costing ``cost`` (component → units): the table, the
        orphan index at ``s``'s shard, the owner index split between the ``old`` and ``new`` owner
        (what it deletes from one and inserts into the other)."""
        store = self.store
        touches = []
        for component, units in cost.items():
            if component == TABLE:
                touches.append(Touch(TABLE, stream_hash(s) % store.table_partitions, True, units))
            elif component == self.design.orphan_index:
                part = self._orphan_parts[self.free.shard_of(s)]
                touches.append(Touch(component, part, True, units))
            elif component == self.design.owner_index:
                if old is not None and new is not None:
                    touches.append(self.owner_touch(old, units / 2))
                    touches.append(self.owner_touch(new, units / 2))
                else:
                    touches.append(self.owner_touch(old or new or "?", units))
        return touches

    # --- requests ----------------------------------------------------------------------------

    def rtt(self) -> float:
        """One round trip."""
        return self.rng.uniform(*RTT_SECONDS)

    def send(
        self,
        requests: list[Request],
        then: Callable[[list[Answer]], None] | None = None,
        *,
        attempts: int = MAX_ATTEMPTS,
        weight: float = 1.0,
    ) -> None:
        """Send ``requests`` at once (in flight together, as a worker's parallel calls are);
        ``then`` gets every answer once the last is in. A throttled request is retried after
        botocore's backoff, up to ``attempts`` attempts in all."""
        answers: list[Answer | None] = [None] * len(requests)
        self._attempt(requests, list(range(len(requests))), answers, then, attempts, weight, 1)

    def _attempt(
        self,
        requests: list[Request],
        indexes: list[int],
        answers: list[Answer | None],
        then: Callable[[list[Answer]], None] | None,
        attempts: int,
        weight: float,
        attempt: int,
    ) -> None:
        now, store = self.sim.now, self.store
        again = []
        for i in indexes:
            r = requests[i]
            holds = r.check is None or r.check(r.arg)
            if store.attempt(now, r.touches if holds else r.conflict, weight):
                if holds and r.apply is not None:
                    r.apply(r.arg)
                answers[i] = Answer.OK if holds else Answer.CONFLICT
            elif attempt >= attempts:
                answers[i] = Answer.THROTTLED
            else:
                again.append(i)
        rtt = self.rtt()
        if again:
            backoff = self.rng.random() * min(20.0, 2.0 ** (attempt - 1))
            retry = functools.partial(
                self._attempt, requests, again, answers, then, attempts, weight, attempt + 1
            )
            self.sim.after(rtt + backoff, retry)
        elif then is not None:
            self.sim.after(rtt, then, answers)

    def write(
        self,
        touches: list[Touch],
        conflict: list[Touch],
        condition: Callable[[], bool] | None,
        apply: Callable[[], None] | None,
        then: Callable[[Answer], None] | None,
        *,
        attempts: int = MAX_ATTEMPTS,
        weight: float = 1.0,
    ) -> None:
        """One conditional write (see :meth:`send`); ``then`` gets its answer."""
        done = None if then is None else (lambda answers: then(answers[0]))  # type: ignore[misc]
        check = None if condition is None else (lambda _: condition())
        effect = None if apply is None else (lambda _: apply())
        request = Request(touches, conflict, check, effect)
        self.send([request], done, attempts=attempts, weight=weight)

    def read(
        self,
        touches: list[Touch],
        then: Callable[[Answer], None],
        *,
        attempts: int = MAX_ATTEMPTS,
        weight: float = 1.0,
    ) -> None:
        """One read (see :meth:`send`)."""
        self.write(touches, [], None, None, then, attempts=attempts, weight=weight)

    # --- the command queue -------------------------------------------------------------------

    def send_handoff(self, s: int, *, rebalance: bool = False) -> None:
        """A HANDOFF command for ``s``; a waiting long poll gets it after :data:`SQS_SECONDS`."""
        if rebalance:
            self.rebalance_handoffs.append(self.sim.now)
        self.queue.append((s, rebalance, 0))
        if self.waiting:
            agent = self.waiting.pop(self.rng.randrange(len(self.waiting)))
            self.sim.after(SQS_SECONDS, agent.receive)
