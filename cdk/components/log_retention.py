"""Retention on log groups that AWS services create and name on their own."""

from __future__ import annotations

from typing import Final

from aws_cdk import Acknowledgment, ArnFormat, RemovalPolicy, Stack, Validations
from aws_cdk import aws_logs as logs
from constructs import Construct

from cdk.components.table_grants import nag_spelling

LOG_RETENTION_PROVIDER_ID: Final = "LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a"
"""Construct id (in the stack) of the CDK's singleton function behind ``logs.LogRetention``."""


def retain_service_log_group(
    scope: Construct, construct_id: str, *, log_group_name: str, retention: logs.RetentionDays
) -> logs.LogRetention:
    """Give ``log_group_name`` ``retention`` and delete it with the stack.

    For a group that an AWS service creates on its first write (API Gateway's execution logs, a
    Lambda function's ``/aws/lambda/`` group). On a stack deployed before, such a group already
    exists, so an ``AWS::Logs::LogGroup`` of its name would fail the update ("already exists");
    the CDK's ``LogRetention`` custom resource sets retention on the group whether or not it
    exists (creating it if missing) and, removal policy ``DESTROY``, deletes it on destroy.
    """
    retained = logs.LogRetention(
        scope,
        construct_id,
        log_group_name=log_group_name,
        retention=retention,
        removal_policy=RemovalPolicy.DESTROY,
    )
    stack = Stack.of(scope)
    role = stack.node.find_child(LOG_RETENTION_PROVIDER_ID).node.find_child("ServiceRole")
    group_arn = stack.format_arn(
        service="logs",
        resource="log-group",
        resource_name=f"{log_group_name}:*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    Validations.of(role).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]",
            reason="The CDK's log retention function writes its own logs with Lambda's basic "
            "execution policy; its log group is named only once the function exists.",
        ),
        Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason="The CDK's log retention function puts and deletes retention policies on "
            "groups named at deploy time; the CDK grants these two actions on every group.",
        ),
        Acknowledgment(
            id=f"AwsSolutions-IAM5[Resource::{nag_spelling(stack.resolve(group_arn))}]",
            reason="Deleting a log group on destroy needs its ARN with the trailing wildcard "
            "of its streams; the grant covers this one group and nothing wider.",
        ),
    )
    return retained
