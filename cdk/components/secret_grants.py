"""Access to the Secrets Manager secrets streams refer to: those whose names start with the
deployment's ``secrets_prefix`` (and Secrets Manager's random name suffix), nothing wider."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, ArnFormat, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.components.table_grants import nag_spelling


def grant_stream_secrets(
    scope: Construct, construct_id: str, role: iam.IRole, prefix: str, actions: Sequence[str]
) -> iam.Policy:
    """A policy ``construct_id`` in ``scope`` letting ``role`` call ``actions`` on the secrets
    under ``prefix``, with the cdk-nag acknowledgment of its one wildcard."""
    arn = Stack.of(scope).format_arn(
        service="secretsmanager",
        resource="secret",
        resource_name=f"{prefix}*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    policy = iam.Policy(
        scope,
        construct_id,
        statements=[iam.PolicyStatement(actions=list(actions), resources=[arn])],
    )
    policy.attach_to_role(role)
    Validations.of(policy).acknowledge(
        Acknowledgment(
            id=f"AwsSolutions-IAM5[Resource::{nag_spelling(Stack.of(scope).resolve(arn))}]",
            reason="Streams refer to secrets by name under the operator's chosen prefix "
            "(the secretsPrefix context key); the wildcard covers that prefix and Secrets "
            "Manager's random name suffix, nothing wider.",
        )
    )
    return policy
