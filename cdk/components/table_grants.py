"""Least-privilege data grants: exactly the actions each principal calls, on exactly the resources.

Each principal's DynamoDB access is a :class:`TableAccess`: actions on the table (its items; the
worker's ``DescribeTable`` too), and per index the reads it makes there (every Query and Scan of
streamlease goes to an index), so no grant needs an ``index/*`` wildcard. The SQS and Kinesis
actions are listed beside them. When code starts calling another action, its principal's entry
here changes with it (``tests/infra/test_grants.py`` lists them per principal).

IAM authorizes SQS's batch calls (``ChangeMessageVisibilityBatch``) by the single action's name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam

from streamlease.indexes import (
    BY_OWNER,
    BY_SHARD_EXPIRY,
    BY_STATE,
    BY_STATE_EXPIRY,
    FLEET,
    LEGACY_BY_OWNER,
)

GET: Final = "dynamodb:GetItem"
BATCH_GET: Final = "dynamodb:BatchGetItem"
PUT: Final = "dynamodb:PutItem"
UPDATE: Final = "dynamodb:UpdateItem"
DELETE: Final = "dynamodb:DeleteItem"
QUERY: Final = "dynamodb:Query"
SCAN: Final = "dynamodb:Scan"
DESCRIBE: Final = "dynamodb:DescribeTable"


@dataclass(frozen=True)
class TableAccess:
    """The DynamoDB actions one principal calls: on the table (its items, its description), and
    on each index."""

    items: tuple[str, ...] = ()
    indexes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


API_TABLE: Final = TableAccess(
    items=(GET, BATCH_GET, UPDATE),
    indexes={BY_STATE.name: (QUERY,), FLEET.name: (QUERY,), BY_OWNER.name: (SCAN,)},
)
"""The API: streams written by conditional updates (create, start/stop, delete's tombstone, and
the orphan-index entry a start aligns), read one by one or in batches (a listing page, the
sessions holding them); listings page through ``by-state``, or scan ``by-holder`` for a
connection state; ``GET /workers`` reads the fleet."""
REAPER_TABLE: Final = TableAccess(
    items=(GET, UPDATE),
    indexes={FLEET.name: (QUERY,), BY_OWNER.name: (QUERY, SCAN)},
)
"""The reaper: the fleet's sessions, tombstones (updates) and their re-reads, the dead task's
leases from ``by-holder`` (one query per session; a scan when none of its sessions can be
read), and their releases."""
AUDITOR_TABLE: Final = TableAccess(
    items=(BATCH_GET,),
    indexes={FLEET.name: (QUERY,), BY_OWNER.name: (SCAN,), BY_SHARD_EXPIRY.name: (SCAN,)},
)
"""The auditor: reads only; the fleet, the held streams with their connection states
(``by-holder``) and the free ones (the orphan index), and a batch of orphans' times."""
WORKER_TABLE: Final = TableAccess(
    items=(GET, BATCH_GET, PUT, UPDATE, DELETE, DESCRIBE),
    indexes={
        FLEET.name: (QUERY,),
        BY_SHARD_EXPIRY.name: (QUERY, SCAN),
        BY_OWNER.name: (QUERY, SCAN),
    },
)
"""The worker: its session (created once with a conditional put, renewed, tombstoned), the
fleet's tombstones deleted, every lease write, re-reads of lost answers, the fleet digest (read,
claimed, written), the live peers' load figures in batches (the ``fleet`` index does not
carry them); orphans from the orphan index (sessions scan it, per-stream leases query
it), its own streams from ``by-holder`` and, a page a round for the fleet, the streams held
through sessions whose items may be gone; the table's description every few minutes (its warm
write throughput, which paces the fleet's handoffs)."""
PREVIOUS_WORKERS: Final = TableAccess(
    indexes={BY_STATE_EXPIRY.name: (QUERY,), LEGACY_BY_OWNER.name: (QUERY,)}
)
"""What the previous release's workers read that this one's do not: granted to the worker role
as well at the migration stage where this release rolls out over the previous one
(``streamlease:tableIndexes=holder-added``), so old tasks keep working until replaced."""


CONSUMER_WATERMARKS: Final = TableAccess(items=(GET, PUT))
"""The consumer Lambda, on its watermark table (``streamlease.consumer.DynamoWatermarks``): a
shard's item (a new shard's parents' too) read when a batch starts, written once when it ends
(a put conditional on the version read)."""


def with_access(access: TableAccess, more: TableAccess) -> TableAccess:
    """``access`` and ``more`` together."""
    indexes = {name: tuple(actions) for name, actions in access.indexes.items()}
    for name, actions in more.indexes.items():
        indexes[name] = tuple(dict.fromkeys((*indexes.get(name, ()), *actions)))
    items = tuple(dict.fromkeys((*access.items, *more.items)))
    return TableAccess(items=items, indexes=indexes)


SEND_COMMANDS: Final = ("sqs:SendMessage",)
"""The API and the reaper send start and handoff commands."""
WORKER_COMMANDS: Final = (
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:SendMessage",
)
"""The worker polls commands, deletes handled ones, gives others back, sends handoffs."""
WORKER_SINK: Final = ("kinesis:PutRecords",)


def grant_table(table: dynamodb.ITableV2, role: iam.IGrantable, access: TableAccess) -> None:
    """Grant ``role`` exactly ``access`` on ``table`` and its named indexes."""
    if access.items:
        iam.Grant.add_to_principal(
            grantee=role, actions=list(access.items), resource_arns=[table.table_arn]
        )
    for index, actions in sorted(access.indexes.items()):
        iam.Grant.add_to_principal(
            grantee=role,
            actions=list(actions),
            resource_arns=[f"{table.table_arn}/index/{index}"],
        )


def nag_spelling(node: Any) -> str:
    """A resolved CloudFormation value as cdk-nag spells it in finding ids."""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return str(delimiter).join(nag_spelling(item) for item in items)
        if "Fn::Sub" in node:
            return nag_spelling(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{nag_spelling(resource)}.{nag_spelling(attribute)}>"
        if "Fn::ImportValue" in node:
            return nag_spelling(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{nag_spelling(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"), ensure_ascii=False)
