"""Least-privilege data grants: exactly the actions each principal calls, on exactly the resources.

Each principal's DynamoDB access is a :class:`TableAccess`: item actions on the table, and per
index the reads it makes there (every Query and Scan of streamlease goes to an index), so no
grant needs an ``index/*`` wildcard. The SQS and Kinesis actions are listed beside them. When
code starts calling another action, its principal's entry here changes with it
(``tests/infra/test_grants.py`` lists them per principal).

IAM authorizes SQS's batch calls (``ChangeMessageVisibilityBatch``) by the single action's name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam

from streamlease.schema import BY_OWNER, BY_STATE, BY_STATE_EXPIRY, FLEET

GET: Final = "dynamodb:GetItem"
BATCH_GET: Final = "dynamodb:BatchGetItem"
PUT: Final = "dynamodb:PutItem"
UPDATE: Final = "dynamodb:UpdateItem"
DELETE: Final = "dynamodb:DeleteItem"
QUERY: Final = "dynamodb:Query"
SCAN: Final = "dynamodb:Scan"


@dataclass(frozen=True)
class TableAccess:
    """The DynamoDB actions one principal calls: on the table's items, and on each index."""

    items: tuple[str, ...] = ()
    indexes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


API_TABLE: Final = TableAccess(
    items=(GET, BATCH_GET, UPDATE),
    indexes={BY_STATE.name: (QUERY,), FLEET.name: (QUERY,)},
)
"""The API: streams written by conditional updates (create, start/stop, delete's tombstone), read
one by one or in batches (a listing page, the sessions holding them); listings page through
``by-state``; ``GET /workers`` reads the fleet."""
REAPER_TABLE: Final = TableAccess(
    items=(GET, UPDATE),
    indexes={FLEET.name: (QUERY,), BY_OWNER.name: (SCAN,)},
)
"""The reaper: the fleet's sessions, tombstones (updates) and their re-reads, the dead task's
leases from a scan of the sparse ``by-owner`` index, and their releases."""
AUDITOR_TABLE: Final = TableAccess(
    items=(BATCH_GET,),
    indexes={FLEET.name: (QUERY,), BY_STATE_EXPIRY.name: (QUERY,)},
)
"""The auditor: reads only; the fleet, the STARTED streams, and a batch of orphans' times."""
WORKER_TABLE: Final = TableAccess(
    items=(GET, PUT, UPDATE, DELETE),
    indexes={FLEET.name: (QUERY,), BY_STATE_EXPIRY.name: (QUERY,), BY_OWNER.name: (QUERY,)},
)
"""The worker: its session (created once with a conditional put, renewed, tombstoned), the
fleet's tombstones deleted, every lease write, re-reads of lost answers; orphans and expiring
leases from ``by-state-expiry``, its own streams from ``by-owner``."""

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
