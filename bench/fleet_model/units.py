"""What each request of one design costs: write units per component, and the sizes reads add up.

:mod:`bench.fleet_model.calibrate` fills these in from requests the real stores send to the moto
server, counted by :mod:`bench.request_counter` (the same counting as ``make bench``'s write-cost
section, whose index rules ``tests/moto/test_bench_write_units.py`` checks against moto).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

READ_BLOCK_BYTES: Final = 4096
PAGE_BYTES: Final = 1024 * 1024
"""A Query or Scan answers at most 1 MB per request."""


def read_units(total_bytes: float) -> float:
    """Eventually consistent read units of one Query/Scan page or GetItem answering
    ``total_bytes`` (the sizes of the items read, summed, then rounded up to 4 KB; half a unit
    per 4 KB; at least half a unit)."""
    return max(1, math.ceil(total_bytes / READ_BLOCK_BYTES)) * 0.5


def pages(total_bytes: float) -> int:
    """Requests a Query or Scan needs for ``total_bytes`` of items (1 MB per page, at least 1)."""
    return max(1, math.ceil(total_bytes / PAGE_BYTES))


@dataclass(frozen=True)
class Units:
    """Per-request costs of one design.

    Write costs map a component (``table`` or an index name) to write units; the partition a
    unit lands in is the world's business (the item's key, the old or new owner, the shard).
    """

    session_base_bytes: float
    """A session's item without its checkpoint vector (DynamoDB's size rule)."""
    vector_bytes_per_stream: float
    """What one held stream adds to the session item (its checkpoint-vector slot)."""
    renewal_index: Mapping[str, float]
    """Index units of a session renewal (the fleet index's projected fields change)."""
    session_create: Mapping[str, float]
    tombstone: Mapping[str, float]
    acquire: Mapping[str, float]
    release: Mapping[str, float]
    take_from: Mapping[str, float]
    release_for: Mapping[str, float]
    connection: Mapping[str, float]
    """A holder's connection-state write after it connected."""
    fleet_entry_bytes: float
    """One worker in the fleet index (its projection)."""
    owner_entry_bytes: float
    """One stream in ``by-owner``."""
    orphan_entry_bytes: float
    """One stream in the orphan index (``by-state-expiry`` or its successor)."""
    digest_bytes: float = 0.0
    """The fleet digest item (designs that have one)."""
    digest_write: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def renewal_table_units(self, held: int) -> float:
        """Table write units of a renewal carrying ``held`` streams (1 per started KB)."""
        size = self.session_base_bytes + held * self.vector_bytes_per_stream
        return float(max(1, math.ceil(size / 1024)))


NOMINAL_UNITS: Final = Units(
    session_base_bytes=300,
    vector_bytes_per_stream=5.5,
    renewal_index={"fleet": 1},
    session_create={"table": 1, "fleet": 1},
    tombstone={"table": 1, "fleet": 1},
    acquire={"table": 1, "orphans": 1, "by-owner": 1},
    release={"table": 1, "orphans": 1, "by-owner": 1},
    take_from={"table": 1, "by-owner": 2},
    release_for={"table": 1, "orphans": 1, "by-owner": 1},
    connection={"table": 1},
    fleet_entry_bytes=250,
    owner_entry_bytes=100,
    orphan_entry_bytes=110,
    digest_bytes=150,
    digest_write={"table": 1},
)
"""Round request costs, close to the moto-measured ones (component names of the model's own:
``orphans``, ``by-owner``): for unit tests and studies that run without a moto server."""
