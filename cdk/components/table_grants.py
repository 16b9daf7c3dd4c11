"""Table grants whose index wildcard is acknowledged to cdk-nag, next to the grant itself."""

from __future__ import annotations

import json
from typing import Any

import jsii
from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import IConstruct, IValidation

INDEX_WILDCARD_REASON = (
    "The table grant helpers scope index access as '<table ARN>/index/*': every index of this one "
    "table (the schema's by-state-expiry, by-owner, fleet and by-state) and nothing else."
)


def grant_table_data(table: dynamodb.ITableV2, role: iam.IRole, *, write: bool) -> iam.Grant:
    """Grant ``role`` the data actions on ``table`` and its indexes: read, or read and write.

    cdk-nag reports the index wildcard (AwsSolutions-IAM5) under the table ARN as CloudFormation
    sees it in the role's stack, which for a table of another stack is known only once CDK has
    resolved cross-stack references. The acknowledgement is therefore added in ``role``'s
    validation, which runs after that resolution and before the policy checks.
    """
    grant = table.grant_read_write_data(role) if write else table.grant_read_data(role)
    role.node.add_validation(_IndexWildcardAcknowledgement(role, table))
    return grant


@jsii.implements(IValidation)
class _IndexWildcardAcknowledgement:
    def __init__(self, role: IConstruct, table: dynamodb.ITableV2) -> None:
        self._role = role
        self._table = table

    def validate(self) -> list[str]:
        resolved = Stack.of(self._role).resolve(self._table.table_arn)
        Validations.of(self._role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::{nag_spelling(resolved)}/index/*]",
                reason=INDEX_WILDCARD_REASON,
            )
        )
        return []


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
