"""The lease table's write units a second, read with DescribeTable from the moto server: a
table made with warm throughput reads back as its lowest figure among the parts a handoff
writes; one made without reads as a new on-demand table; a table that is not there is a
StoreError, never a raw botocore error."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from streamlease.errors import StoreError
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY, FLEET, create_table_kwargs
from streamlease.settings import Settings
from streamlease.table_capacity import ON_DEMAND_WRITE_UNITS, read_table_write_units


def _warm(write_units: int) -> dict[str, int]:
    return {"ReadUnitsPerSecond": 12000, "WriteUnitsPerSecond": write_units}


def test_a_pre_warmed_table_reads_back_as_its_lowest_handoff_figure(dynamodb: Any) -> None:
    """The table is warmed to 20,000, the orphan index to 9,000, by-holder to 15,000 and the
    fleet index (which no handoff writes) not at all: 9,000."""
    name = f"warm-{uuid.uuid4().hex[:12]}"
    request: Any = create_table_kwargs(name)
    request["WarmThroughput"] = _warm(20000)
    warmed = {BY_SHARD_EXPIRY.name: 9000, BY_OWNER.name: 15000}
    for index in request["GlobalSecondaryIndexes"]:
        if index["IndexName"] in warmed:
            index["WarmThroughput"] = _warm(warmed[index["IndexName"]])
    dynamodb.create_table(**request)
    described = dynamodb.describe_table(TableName=name)["Table"]
    fleet_index = next(
        i for i in described["GlobalSecondaryIndexes"] if i["IndexName"] == FLEET.name
    )
    assert fleet_index["WarmThroughput"]["WriteUnitsPerSecond"] == ON_DEMAND_WRITE_UNITS

    assert read_table_write_units(dynamodb, name) == 9000


def test_a_table_made_without_warm_throughput_reads_as_a_new_on_demand_table(
    aws_settings: Settings, dynamodb: Any
) -> None:
    assert read_table_write_units(dynamodb, aws_settings.table_name) == ON_DEMAND_WRITE_UNITS


def test_a_table_warmed_later_reads_back_its_new_figure(
    aws_settings: Settings, dynamodb: Any
) -> None:
    """UpdateTable raises the table's and its indexes' warm throughput (one change a call)."""
    table = aws_settings.table_name
    dynamodb.update_table(TableName=table, WarmThroughput=_warm(30000))
    for index, units in ((BY_SHARD_EXPIRY.name, 25000), (BY_OWNER.name, 18000)):
        dynamodb.update_table(
            TableName=table,
            GlobalSecondaryIndexUpdates=[
                {"Update": {"IndexName": index, "WarmThroughput": _warm(units)}}
            ],
        )
    assert read_table_write_units(dynamodb, table) == 18000


def test_a_missing_table_is_a_store_error(dynamodb: Any) -> None:
    with pytest.raises(StoreError, match="ResourceNotFoundException"):
        read_table_write_units(dynamodb, f"gone-{uuid.uuid4().hex[:12]}")
