"""A deployed table's indexes keep their keys and projections.

CloudFormation (and DynamoDB) change only the throughput and contributor insights of an existing
global secondary index: an update that changes its key schema or projection fails, and a new
name is a create plus a drop, one of which is allowed per update (``MIGRATION_STAGES``).
``DEPLOYED`` is what tables in the field have, written out by hand rather than read from
``streamlease.schema``, so an edit of the schema cannot move both sides at once. A new index
gets a new name and a migration stage; a released one is added here as it ships.
"""

from __future__ import annotations

from typing import Any, Final

import pytest
from aws_cdk import Stack
from template_support import lease_table_properties

from cdk.config import TableIndexes


def _include(*attributes: str) -> dict[str, Any]:
    return {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(attributes)}


def _keys(partition: str, sort: str | None = None) -> list[dict[str, str]]:
    keys = [{"AttributeName": partition, "KeyType": "HASH"}]
    if sort is not None:
        keys.append({"AttributeName": sort, "KeyType": "RANGE"})
    return keys


DEPLOYED: Final[dict[str, dict[str, Any]]] = {
    "by-state-expiry": {
        "KeySchema": _keys("desired_state", "lease_expires_at_ms"),
        "Projection": _include("lease_owner", "lease_epoch", "connection_state"),
    },
    "by-owner": {
        "KeySchema": _keys("lease_owner"),
        "Projection": _include("lease_epoch", "lease_slot", "desired_state", "generation"),
    },
    "by-shard-expiry": {
        "KeySchema": _keys("expiry_shard", "lease_expires_at_ms"),
        "Projection": _include("lease_owner", "lease_epoch"),
    },
    "by-holder": {
        "KeySchema": _keys("lease_owner"),
        "Projection": _include(
            "lease_epoch", "lease_slot", "desired_state", "generation", "connection_state"
        ),
    },
    "fleet": {
        "KeySchema": _keys("kind", "started_at_ms"),
        "Projection": _include(
            "worker_id",
            "state",
            "hb",
            "heartbeat_at_ms",
            "expires_at_ms",
            "active_streams",
            "capacity",
            "liveness",
            "host",
            "pid",
            "task_arn",
            "version",
        ),
    },
    "by-state": {
        "KeySchema": _keys("desired_state", "stream_id"),
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    },
}
"""Every index a released table has or had, as deployed."""


@pytest.mark.parametrize("layout", list(TableIndexes), ids=str)
def test_no_layout_changes_a_deployed_index_s_keys_or_projection(
    small_stack: Stack, layout: TableIndexes
) -> None:
    """Every layout ``streamlease:tableIndexes`` can deploy, the current one included, keeps
    each index a table already has exactly as it was deployed (projected attributes in any
    order)."""
    table = lease_table_properties(small_stack, layout)
    for gsi in table["GlobalSecondaryIndexes"]:
        deployed = DEPLOYED.get(gsi["IndexName"])
        if deployed is None:
            continue  # a new index: created by its own stage
        assert gsi["KeySchema"] == deployed["KeySchema"], gsi["IndexName"]
        projection = dict(gsi["Projection"])
        expected = dict(deployed["Projection"])
        assert sorted(projection.pop("NonKeyAttributes", [])) == sorted(
            expected.pop("NonKeyAttributes", [])
        ), f"{gsi['IndexName']}: a deployed index's projection cannot change"
        assert projection == expected, gsi["IndexName"]
