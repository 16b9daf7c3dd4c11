"""Reads of the stream leases: one item, and the queries and scans of the lease indexes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamlease import dynamo
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY, shard_key
from streamlease.lease_table.layout import (
    _names,
)
from streamlease.lease_table.table import LeaseTable
from streamlease.model import LeaseView, Stream, is_tombstone
from streamlease.schema import DesiredState, stream_key

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import QueryInputTypeDef, ScanInputTypeDef


@dataclasses.dataclass(frozen=True)
class OwnedStreams:
    """What :meth:`LeaseStore.stopped_of` found: the owned streams asked to stop, those
    changed above a generation (STARTED), and the number owned in all."""

    stopped: tuple[LeaseView, ...]
    count: int
    changed: tuple[LeaseView, ...] = ()


class LeaseQueries(LeaseTable):
    """The reads of :class:`~streamlease.lease_store.LeaseStore`."""

    # --- reads -------------------------------------------------------------------------------

    def read(self, stream_id: str, *, consistent: bool = True) -> Stream | None:
        """The stream item, or None if there is none (or only a deleted stream's tombstone)."""
        item = self._get(stream_key(stream_id), consistent=consistent)
        return None if item is None or is_tombstone(item) else Stream.from_item(item)

    def expiring_before(self, bound_ms: int, *, limit: int) -> list[LeaseView]:
        """Per-stream leases: STARTED streams whose ``lease_expires_at_ms < bound_ms``,
        soonest first (the one shard of ``by-shard-expiry`` such a fleet writes).

        With ``bound_ms`` = the acquire cutoff these are the orphans (free, or a lease that
        lapsed); with :func:`rules.suspect_bound_ms` they also include leases that missed
        heartbeats.
        """
        if limit <= 0:
            return []
        query: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_SHARD_EXPIRY.name,
            "KeyConditionExpression": "#shard = :shard AND #exp < :bound",
            "ExpressionAttributeNames": _names("#shard", "#exp"),
            "ExpressionAttributeValues": dynamo.serialize(
                {":shard": shard_key(0), ":bound": bound_ms}  # per-stream: one shard
            ),
        }
        return [LeaseView.from_item(item) for item in self._query(query, limit)]

    def held_through_sessions(
        self, *, limit: int, start: Mapping[str, Any] | None = None
    ) -> tuple[list[LeaseView], Mapping[str, Any] | None]:
        """One page of the STARTED streams attached to a session (those with a checkpoint
        slot), from a Scan of ``by-holder`` reading at most ``limit`` entries (eventually
        consistent: owner and epoch), from ``start``; and where the next page starts (None:
        that was the last one). A Scan returns a holder's entries together, so a page names a
        few owners; each page reads the next key range, so no partition is read twice in a
        walk. The cursor is opaque: pass it back as it is. The views carry the stream, owner
        and epoch only: a page is up to ``limit`` of the fleet's held streams, read every
        round, and each attribute more is parsed a thousand times only to be dropped (a
        worker's resident set keeps the high-water mark)."""
        projection = "#pk, #owner, #epoch"
        scan: ScanInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_OWNER.name,
            "FilterExpression": "attribute_exists(#slot) AND #state = :started",
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": _names("#slot", "#state", projection),
            "ExpressionAttributeValues": dynamo.serialize({":started": DesiredState.STARTED.value}),
            "Limit": limit,
        }
        if start is not None:
            scan["ExclusiveStartKey"] = dict(start)
        page = dynamo.call(self._client.scan, **scan)
        views = [LeaseView.from_item(dynamo.plain(item)) for item in page.get("Items", [])]
        return views, page.get("LastEvaluatedKey") or None

    def orphans(
        self, cutoff_ms: int, *, limit: int, segment: int = 0, segments: int = 1
    ) -> list[LeaseView]:
        """Sessions: STARTED streams nobody holds (``lease_expires_at_ms < cutoff_ms``: free,
        or a per-stream lease that lapsed), from one ``segment`` of ``segments`` of a Scan of
        ``by-shard-expiry`` (:func:`rules.scan_segments`): one request reads a small fleet's
        every orphan; a large fleet's workers each read a part. At most ``limit``.

        Per-stream leases read it whole now and then, for the free streams a session fleet left
        in the shards such a fleet never queries (:mod:`worker.ownership.reconciler`). The Scan
        reads every entry (eventually consistent: half a read unit per 4 KB): with per-stream leases
        every STARTED stream has one, about 150 bytes, so some 0.02 read units per stream."""
        if limit <= 0:
            return []
        scan: ScanInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_SHARD_EXPIRY.name,
            "FilterExpression": "#exp < :cutoff",
            "ExpressionAttributeNames": _names("#exp"),
            "ExpressionAttributeValues": dynamo.serialize({":cutoff": cutoff_ms}),
        }
        if segments > 1:
            scan["Segment"], scan["TotalSegments"] = segment, segments
        return [
            LeaseView.from_item(item) for item in dynamo.items(self._client.scan, scan, limit=limit)
        ]

    def owned_by(self, worker_id: str) -> list[LeaseView]:
        """Leases whose stored owner is ``worker_id``, with their epoch, slot, desired state and
        generation (GSI, eventually consistent: a change may show a moment late)."""
        query: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_OWNER.name,
            "KeyConditionExpression": "#owner = :w",
            "ExpressionAttributeNames": _names("#owner"),
            "ExpressionAttributeValues": dynamo.serialize({":w": worker_id}),
        }
        return [LeaseView.from_item(item) for item in self._query(query, None)]

    def stopped_of(self, worker_id: str, above_generation: int | None = None) -> OwnedStreams:
        """The streams ``worker_id`` owns that are asked to stop — and, with
        ``above_generation``, the STARTED ones whose generation is above it (changed in place,
        or stopped and started again) — and how many it owns in all (GSI, eventually
        consistent). One query of the holder index whose filter leaves only those in the answer:
        the read costs what :meth:`owned_by` costs, but a worker holding thousands of streams
        parses a handful of items, not thousands. A holder passes the lowest generation it
        holds: a stream changed since its acquire is above it, whatever the others'. That
        lets through every stream held above the lowest generation (one restarted, say) every
        time, so the views carry what a holder compares only: stream, epoch, desired state and
        generation."""
        values: dict[str, Any] = {":w": worker_id, ":stopped": DesiredState.STOPPED.value}
        condition = "#state = :stopped"
        if above_generation is not None:
            condition += " OR #gen > :gen"
            values[":gen"] = above_generation
        projection = "#pk, #epoch, #state, #gen"
        request: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_OWNER.name,
            "KeyConditionExpression": "#owner = :w",
            "FilterExpression": condition,
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": _names("#owner", "#state", condition, projection),
            "ExpressionAttributeValues": dynamo.serialize(values),
        }
        found: list[LeaseView] = []
        owned = 0
        while True:
            page = dynamo.call(self._client.query, **request)
            owned += page.get("ScannedCount", 0)
            found += (LeaseView.from_item(dynamo.plain(i)) for i in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                stopped = tuple(v for v in found if v.desired_state is DesiredState.STOPPED)
                changed = tuple(v for v in found if v.desired_state is DesiredState.STARTED)
                return OwnedStreams(stopped, owned, changed)
            request["ExclusiveStartKey"] = start
