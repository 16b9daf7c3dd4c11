"""How many write units a second the lease table can take at once for the writes a handoff makes.

A handoff (a release, then an acquire by another worker) writes the table's item and every
index whose key or projection holds ``lease_owner`` (:data:`HANDOFF_INDEXES`). DynamoDB serves
at once what its *warm throughput* says (``DescribeTable``'s ``WarmThroughput``, the table's
and each index's), capped, for a provisioned table, by the write capacity provisioned now, and
for an on-demand one by a maximum the table may set. :func:`handoff_write_units` reads that
figure from a ``DescribeTable`` answer (pure); :func:`read_table_write_units` asks DynamoDB.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from streamlease.dynamo import call
from streamlease.indexes import INDEXES, MIGRATION_STAGES, IndexSpec
from streamlease.schema import StreamAttr

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

ON_DEMAND_WRITE_UNITS: Final = 4000
"""Write units a second a new on-demand table (and each of its indexes) can take at once:
DynamoDB's documented default warm throughput. It grows with use and can be raised beforehand
(pre-warming); the per-table on-demand quota is 40,000 by default."""


def _written_by_handoffs(index: IndexSpec) -> bool:
    """A release removes ``lease_owner`` and the acquire sets it, so an index is written by a
    handoff exactly when that attribute is one of its keys or projected attributes."""
    attributes = {index.partition_key, index.sort_key, *(index.projected or ())}
    return StreamAttr.LEASE_OWNER in attributes


HANDOFF_INDEXES: Final = frozenset(
    index.name
    for stage in (INDEXES, *MIGRATION_STAGES)
    for index in stage
    if _written_by_handoffs(index)
)
"""The indexes a handoff writes, of the current layout and of every migration stage: the
orphan index (``by-shard-expiry``), ``by-holder`` and, while a table migrates, the previous
release's ``by-state-expiry`` and ``by-owner``. The others (``fleet``, ``by-state``) are not
written by a handoff, so their warm throughput — which grows only with their own use — does
not bound it."""


def handoff_write_units(table: Mapping[str, Any]) -> int:
    """Write units a second the table described by ``table`` (``DescribeTable``'s ``Table``)
    can take at once for a handoff's writes: the least of the table's and
    :data:`HANDOFF_INDEXES`' ``WarmThroughput.WriteUnitsPerSecond``; for a provisioned table
    also of their ``ProvisionedThroughput.WriteCapacityUnits``, for an on-demand one of their
    ``OnDemandThroughput.MaxWriteRequestUnits`` when set. :data:`ON_DEMAND_WRITE_UNITS` when
    the answer carries none of these figures. Missing or malformed parts are skipped."""
    summary = table.get("BillingModeSummary")
    on_demand = isinstance(summary, Mapping) and summary.get("BillingMode") == "PAY_PER_REQUEST"
    parts = [table]
    for index in table.get("GlobalSecondaryIndexes") or ():
        if isinstance(index, Mapping) and index.get("IndexName") in HANDOFF_INDEXES:
            parts.append(index)
    figures: list[int | None] = []
    for part in parts:
        figures.append(_figure(part, "WarmThroughput", "WriteUnitsPerSecond"))
        if on_demand:
            figures.append(_figure(part, "OnDemandThroughput", "MaxWriteRequestUnits"))
        else:
            # An on-demand table states 0 here; an old provisioned one may lack the summary.
            figures.append(_figure(part, "ProvisionedThroughput", "WriteCapacityUnits"))
    known = [figure for figure in figures if figure is not None]
    return min(known) if known else ON_DEMAND_WRITE_UNITS


def _figure(part: Mapping[str, Any], group: str, key: str) -> int | None:
    """``part[group][key]`` when a positive whole number, else None (absent, 0, -1 for "no
    maximum", or not a number)."""
    inner = part.get(group)
    value = inner.get(key) if isinstance(inner, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def read_table_write_units(client: DynamoDBClient, table_name: str) -> int:
    """:func:`handoff_write_units` of ``table_name`` as DynamoDB describes it now (one
    ``DescribeTable``, a control-plane call: read it minutes apart, not per round). Blocking.
    Raises :class:`~streamlease.errors.StoreError` when DynamoDB does not answer or refuses
    (an ``AccessDeniedException`` included)."""
    answer = call(client.describe_table, TableName=table_name)
    return handoff_write_units(answer.get("Table") or {})
