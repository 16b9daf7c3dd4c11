"""The write units a second the lease table can take at once for a handoff's writes, from a
DescribeTable answer; and the worker's copy of that figure, read at start and kept when a read
fails."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from streamlease.errors import StoreError
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY, BY_STATE, FLEET
from streamlease.table_capacity import (
    HANDOFF_INDEXES,
    ON_DEMAND_WRITE_UNITS,
    handoff_write_units,
)
from worker.ownership.table_capacity import TableCapacity


def _index(name: str, warm: int | None = None, provisioned: int = 0) -> dict[str, Any]:
    index: dict[str, Any] = {
        "IndexName": name,
        "ProvisionedThroughput": {
            "ReadCapacityUnits": provisioned,
            "WriteCapacityUnits": provisioned,
        },
    }
    if warm is not None:
        index["WarmThroughput"] = {"ReadUnitsPerSecond": 12000, "WriteUnitsPerSecond": warm}
    return index


def _on_demand(warm: int | None, indexes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    table: dict[str, Any] = {
        "TableName": "leases",
        "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
        "ProvisionedThroughput": {"ReadCapacityUnits": 0, "WriteCapacityUnits": 0},
        "GlobalSecondaryIndexes": indexes or [],
    }
    if warm is not None:
        table["WarmThroughput"] = {"ReadUnitsPerSecond": 12000, "WriteUnitsPerSecond": warm}
    return table


def test_a_handoff_writes_the_orphan_and_holder_indexes_and_their_predecessors() -> None:
    """An index is bounded when it keys or projects the owner; the fleet and listing ones are
    not written by a handoff."""
    assert {BY_SHARD_EXPIRY.name, BY_OWNER.name} <= HANDOFF_INDEXES
    assert {"by-state-expiry", "by-owner"} <= HANDOFF_INDEXES  # while a table migrates
    assert not {FLEET.name, BY_STATE.name} & HANDOFF_INDEXES


def test_an_on_demand_table_states_its_warm_write_throughput() -> None:
    assert handoff_write_units(_on_demand(9000)) == 9000


def test_an_answer_without_any_figure_means_a_new_on_demand_table() -> None:
    """No WarmThroughput anywhere (an older API answer, a stand-in): DynamoDB's default."""
    assert handoff_write_units(_on_demand(None, [_index(BY_OWNER.name)])) == ON_DEMAND_WRITE_UNITS
    assert handoff_write_units({}) == ON_DEMAND_WRITE_UNITS == 4000


def test_an_index_a_handoff_writes_bounds_the_table_when_lower() -> None:
    indexes = [_index(BY_SHARD_EXPIRY.name, warm=6000), _index(BY_OWNER.name, warm=20000)]
    assert handoff_write_units(_on_demand(20000, indexes)) == 6000


def test_an_index_a_handoff_does_not_write_never_bounds_it() -> None:
    """The listing and fleet indexes keep a new table's warm throughput while the table's
    grows with use: they do not slow handoffs down."""
    indexes = [
        _index(BY_SHARD_EXPIRY.name, warm=20000),
        _index(BY_OWNER.name, warm=20000),
        _index(BY_STATE.name, warm=4000),
        _index(FLEET.name, warm=4000),
    ]
    assert handoff_write_units(_on_demand(20000, indexes)) == 20000


def test_an_on_demand_maximum_caps_the_warm_throughput() -> None:
    table = _on_demand(20000)
    table["OnDemandThroughput"] = {"MaxReadRequestUnits": -1, "MaxWriteRequestUnits": 3000}
    assert handoff_write_units(table) == 3000
    table["OnDemandThroughput"]["MaxWriteRequestUnits"] = -1  # no maximum
    assert handoff_write_units(table) == 20000


def test_a_provisioned_table_takes_no_more_than_its_provisioned_write_capacity() -> None:
    """Warm throughput above the capacity provisioned now does not count: the table and each
    index the handoff writes cap it."""
    table: dict[str, Any] = {
        "BillingModeSummary": {"BillingMode": "PROVISIONED"},
        "ProvisionedThroughput": {"ReadCapacityUnits": 100, "WriteCapacityUnits": 500},
        "WarmThroughput": {"ReadUnitsPerSecond": 12000, "WriteUnitsPerSecond": 4000},
        "GlobalSecondaryIndexes": [
            _index(BY_SHARD_EXPIRY.name, warm=4000, provisioned=300),
            _index(BY_OWNER.name, warm=4000, provisioned=800),
            _index(FLEET.name, warm=4000, provisioned=5),
        ],
    }
    assert handoff_write_units(table) == 300
    del table["BillingModeSummary"]  # a table provisioned from the start may not say so
    assert handoff_write_units(table) == 300


class Reader:
    """A stand-in for DescribeTable: answers the figures in turn; None is a failed read."""

    def __init__(self, *answers: int | None) -> None:
        self.answers = list(answers)

    def __call__(self) -> int:
        answer = self.answers.pop(0)
        if answer is None:
            raise StoreError("DynamoDB describe_table failed: AccessDeniedException")
        return answer


def _context() -> Any:
    return SimpleNamespace(
        settings=SimpleNamespace(table_capacity_seconds=600.0),
        table_write_units=ON_DEMAND_WRITE_UNITS,
    )


def test_the_worker_takes_the_table_s_figure_at_each_read() -> None:
    ctx = _context()
    capacity = TableCapacity(cast(Any, ctx), Reader(12000, 8000))
    assert asyncio.run(capacity.refresh()) is True
    assert ctx.table_write_units == 12000
    assert asyncio.run(capacity.refresh()) is True
    assert ctx.table_write_units == 8000


def test_a_failed_read_keeps_the_last_figure() -> None:
    """DynamoDB unreachable, or a role without DescribeTable: the worker goes on with what it
    knew (at start: a new on-demand table's 4,000)."""
    ctx = _context()
    capacity = TableCapacity(cast(Any, ctx), Reader(None, 12000, None))
    assert asyncio.run(capacity.refresh()) is False
    assert ctx.table_write_units == ON_DEMAND_WRITE_UNITS
    asyncio.run(capacity.refresh())
    assert asyncio.run(capacity.refresh()) is False
    assert ctx.table_write_units == 12000
