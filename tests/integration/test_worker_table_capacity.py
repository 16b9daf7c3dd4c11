"""A worker knows the lease table's write units a second (what paces the fleet's handoffs):
read from DescribeTable before its loops start, and again when the table is warmed later."""

from __future__ import annotations

from typing import Any

import pytest
from worker_helpers import START_TIMEOUT, Fleet, Streams

from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY

pytestmark = pytest.mark.slow


def _warm(streams: Streams, table_units: int, index_units: int) -> None:
    """Raise the table's and the handoff indexes' warm write throughput (one change a call)."""
    client: Any = streams.dynamodb
    table = streams.settings.table_name
    warm = {"ReadUnitsPerSecond": 12000, "WriteUnitsPerSecond": table_units}
    client.update_table(TableName=table, WarmThroughput=warm)
    for index in (BY_SHARD_EXPIRY.name, BY_OWNER.name):
        warm = {"ReadUnitsPerSecond": 12000, "WriteUnitsPerSecond": index_units}
        client.update_table(
            TableName=table,
            GlobalSecondaryIndexUpdates=[{"Update": {"IndexName": index, "WarmThroughput": warm}}],
        )


def test_a_worker_reads_the_table_s_write_units_at_start_and_follows_a_later_warming(
    fleet: Fleet, streams: Streams
) -> None:
    """Its ``worker started`` event carries the figure; a re-read logs the change."""
    _warm(streams, table_units=30000, index_units=18000)
    worker = fleet.start(table_capacity_seconds=0.5)

    def logged(message: str) -> list[dict[str, Any]]:
        return [r for r in fleet.log_records(worker) if r.get("message") == message]

    (started,) = fleet.wait(lambda: logged("worker started"), START_TIMEOUT, "the worker started")
    assert started["table_write_units"] == 18000

    _warm(streams, table_units=40000, index_units=25000)
    changed = fleet.wait(
        lambda: [r for r in logged("table write units changed") if r["units"] == 25000],
        START_TIMEOUT,
        "the new figure read",
    )
    assert changed[0]["was"] == 18000
