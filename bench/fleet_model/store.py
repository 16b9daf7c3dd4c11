"""A DynamoDB table as its partitions see it: capacity units per partition per second, throttles.

The model (and its limits, also printed under the tables):

- **Partitions.** Every request is charged to the partitions it touches: the table partition of
  the item's key, and for a write the partition of every index entry it adds, moves, rewrites or
  removes (:class:`Touch`). A table holds :attr:`Store.table_partitions` partitions, its items
  hashed over them; an index holds :attr:`Store.index_partitions`, and all entries with one
  partition key *value* sit in one partition (a value's traffic never spreads: DynamoDB may
  split a hot item collection by sort key over time, "split for heat", but not within seconds,
  and not at all where the sort key takes a handful of values, as ``lease_expires_at_ms`` does
  for sessions: 0 and one fixed value). Both counts stand for a table pre-warmed (or
  provisioned) for the load: an on-demand table serves twice its previous peak at once and
  throttles beyond while it splits, which this model leaves out.
- **Limits.** Per partition and per second (a fixed one-second window): 1,000 write units and
  3,000 read units, for the table and for each index alike. No burst capacity (it never lifts a
  partition above these).
- **Admission.** A request is admitted whole or throttled whole: a write whose index partition
  is full is refused although its table partition has room (an index's back-pressure throttles
  the table). A throttled attempt costs nothing and is counted; the caller retries as botocore
  does (:mod:`bench.fleet_model.world`).

Everything is counted by second, so any window can be summed afterwards: units by component
(``table`` or an index name) and kind, load per partition, throttled attempts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

WRITE_LIMIT: Final = 1000.0
"""Write units per partition per second."""
READ_LIMIT: Final = 3000.0
"""Read units per partition per second (eventually consistent reads cost half a unit per 4 KB)."""
TABLE: Final = "table"


class Touch(NamedTuple):
    """What one request costs one partition: ``units`` write (``write``) or read units."""

    component: str
    """``table`` or the index name."""
    partition: int
    write: bool
    units: float


@dataclass(frozen=True)
class Load:
    """The busiest partition of a window: its share of the limit, and which one it was."""

    fraction: float
    component: str
    write: bool
    second: int

    def describe(self) -> str:
        """``"by-state-expiry writes, 240 %"``."""
        kind = "writes" if self.write else "reads"
        return f"{self.component} {kind}, {self.fraction:.0%}"


class Store:
    """Counts capacity per partition and second; admits or throttles requests."""

    def __init__(self, table_partitions: int, index_partitions: int) -> None:
        """``table_partitions`` / ``index_partitions``: how many partitions the table and each
        index have (see the module docstring)."""
        self.table_partitions = table_partitions
        self.index_partitions = index_partitions
        self._used: dict[tuple[str, int, bool, int], float] = defaultdict(float)
        self._offered: dict[tuple[str, int, bool, int], float] = defaultdict(float)
        self._units: dict[tuple[int, str, bool], float] = defaultdict(float)
        self._throttled: dict[int, float] = defaultdict(float)
        self._requests: dict[int, float] = defaultdict(float)
        self.throttled_by: dict[str, float] = defaultdict(float)
        """Throttled attempts by the component (and kind) that refused them."""

    # --- where things live -----------------------------------------------------------------

    def table_partition(self, key_hash: int) -> int:
        """The table partition of an item whose key hashes to ``key_hash``."""
        return key_hash % self.table_partitions

    def index_partition(self, value_hash: int) -> int:
        """The index partition of every entry whose partition key value hashes so."""
        return value_hash % self.index_partitions

    # --- requests --------------------------------------------------------------------------

    def attempt(self, now: float, touches: Sequence[Touch], weight: float = 1.0) -> bool:
        """Admit a request at ``now`` (seconds) if every partition it touches has room left in
        this second, and charge it; else count it throttled. ``weight``: how many identical
        requests this one stands for."""
        second = math.floor(now)
        self._requests[second] += weight
        for t in touches:
            self._offered[(t.component, t.partition, t.write, second)] += t.units * weight
        for t in touches:
            limit = WRITE_LIMIT if t.write else READ_LIMIT
            if self._used[(t.component, t.partition, t.write, second)] + t.units * weight > limit:
                self._throttled[second] += weight
                self.throttled_by[f"{t.component} {'writes' if t.write else 'reads'}"] += weight
                return False
        for t in touches:
            self._used[(t.component, t.partition, t.write, second)] += t.units * weight
            self._units[(second, t.component, t.write)] += t.units * weight
        return True

    # --- what a window saw -----------------------------------------------------------------

    def units(self, start: float, end: float) -> dict[tuple[str, bool], float]:
        """Units by ``(component, write)`` charged in seconds ``[start, end)``."""
        out: dict[tuple[str, bool], float] = defaultdict(float)
        lo, hi = math.floor(start), math.floor(end)
        for (second, component, write), units in self._units.items():
            if lo <= second < hi:
                out[(component, write)] += units
        return dict(out)

    def throttled(self, start: float, end: float) -> float:
        """Throttled attempts in seconds ``[start, end)``."""
        return sum(n for s, n in self._throttled.items() if start <= s < end)

    def requests(self, start: float, end: float) -> float:
        """Attempts (admitted or not) in seconds ``[start, end)``."""
        return sum(n for s, n in self._requests.items() if start <= s < end)

    def hottest(self, start: float, end: float, components: Iterable[str] | None = None) -> Load:
        """The partition-second with the largest *offered* load (every attempt's units,
        throttled ones included) as a share of its limit in ``[start, end)``: above 1 means
        that partition throttled."""
        wanted = None if components is None else set(components)
        best = Load(0.0, TABLE, True, math.floor(start))
        for (component, _, write, second), used in self._offered.items():
            if not start <= second < end or (wanted is not None and component not in wanted):
                continue
            fraction = used / (WRITE_LIMIT if write else READ_LIMIT)
            if fraction > best.fraction:
                best = Load(fraction, component, write, second)
        return best
