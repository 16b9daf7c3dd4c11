"""The lease store: every change of a stream's lease is one conditional ``UpdateItem``
(architecture §4).

Thin adapter over a boto3 DynamoDB *client* (thread-safe; share one per process). The decisions
— expired? whose is it? where to resume? — come from :mod:`streamlease.rules`; this module only
phrases them as conditions and translates failures into :mod:`streamlease.errors`:

- ``acquire`` → :class:`Lease` or :class:`LeaseConflict`. With a ``slot`` the lease is attached
  to the owner's *session* (architecture §4a) and has no expiry of its own; without, it is a
  per-stream lease (§4b) that its holder renews;
- ``renew`` (per-stream leases) → new expiry, or :class:`StreamStopped` (close normally, then
  release) or :class:`LeaseLost` (stop at once, write nothing more);
- ``release`` → the stream as it is now; a release whose answer was lost is recognised on retry;
- ``take_from`` / ``release_for`` → a dead session's stream taken over or freed, resuming at the
  merged checkpoint (:func:`streamlease.rules.resume_seq`);
- anything the store did not answer → :class:`StoreError` (the write may or may not have landed).

Each concern is a part in :mod:`streamlease.lease_table` (item layout, acquire, holding, a dead
session's streams, reads); :class:`LeaseStore` is all of them over one client and table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from streamlease.lease_table.acquire import LeaseAcquire
from streamlease.lease_table.holding import LeaseHolding
from streamlease.lease_table.queries import LeaseQueries
from streamlease.lease_table.takeover import DeadSessionLeases
from streamlease.schema import Liveness

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch (the clock DynamoDB conditions compare)."""
    return time.time_ns() // 1_000_000


class LeaseStore(LeaseAcquire, LeaseHolding, DeadSessionLeases, LeaseQueries):
    """Acquire, renew (with checkpoint), release, take over and query stream leases."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        clock_skew_ms: int = 1000,
        clock_ms: Callable[[], int] = wall_ms,
        liveness: Liveness = Liveness.SESSION,
    ) -> None:
        """``client``: a boto3 DynamoDB client; ``clock_ms``: for calls given no ``now_ms``;
        ``liveness``: the fleet's mode (it decides a free stream's orphan-index shard)."""
        self._client = client
        self._table = table_name
        self._skew_ms = clock_skew_ms
        self._clock_ms = clock_ms
        self._liveness = liveness
