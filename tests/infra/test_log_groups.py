"""Log groups: every one the app causes expires and goes with a destroy, and the stack never
declares a group that an AWS service creates on its own (an update of a stack that has run
would fail on it: the group already exists)."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Fn, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from template_support import TemplateJson, flat, resources_of

from cdk.components.control_api import STAGE_NAME
from cdk.components.log_retention import LOG_RETENTION_PROVIDER_ID, retain_service_log_group
from cdk.config import DeploymentConfig

SERVICE_CREATED_PREFIXES = ("API-Gateway-Execution-Logs_", "/aws/lambda/")
"""Names API Gateway (execution logs) and Lambda (a function's default group) create on first
write. A function of this stack that has ever run already has its ``/aws/lambda/`` group, so
the prefix is forbidden whatever function it names."""


def _service_created_names(template: TemplateJson) -> list[str]:
    """The ``AWS::Logs::LogGroup`` names in ``template`` that AWS services create on their own."""
    names = [
        flat(group["Properties"].get("LogGroupName", ""))
        for group in resources_of(template, "AWS::Logs::LogGroup").values()
    ]
    return [
        name for name in names if any(f'"{prefix}' in name for prefix in SERVICE_CREATED_PREFIXES)
    ]


def _retained(template: TemplateJson) -> dict[str, dict[str, Any]]:
    """Flattened log group name → properties of each ``Custom::LogRetention``."""
    return {
        flat(body["Properties"]["LogGroupName"]): body["Properties"]
        for body in resources_of(template, "Custom::LogRetention").values()
    }


def _lambda_group(function_logical_id: str) -> str:
    return flat({"Fn::Join": ["", ["/aws/lambda/", {"Ref": function_logical_id}]]})


def test_every_log_group_the_app_causes_has_retention_and_goes_with_the_stack(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """The stack's own groups are declared with retention and deleted with the stack; the groups
    AWS creates on first write (API Gateway's execution logs, the default group of every
    function without a group of its own) get the same retention and removal from a
    ``LogRetention``, which works whether the group exists yet or not."""
    groups = resources_of(stateless_json, "AWS::Logs::LogGroup")
    assert {g["Properties"].get("RetentionInDays") for g in groups.values()} == {
        config.log_retention_days
    }
    assert {g["DeletionPolicy"] for g in groups.values()} == {"Delete"}
    retained = _retained(stateless_json)
    assert {p["RetentionInDays"] for p in retained.values()} == {config.log_retention_days}
    assert {p["RemovalPolicy"] for p in retained.values()} == {"destroy"}
    (rest_api_id,) = resources_of(stateless_json, "AWS::ApiGateway::RestApi")
    execution_logs = {
        "Fn::Join": ["", ["API-Gateway-Execution-Logs_", {"Ref": rest_api_id}, f"/{STAGE_NAME}"]]
    }
    assert flat(execution_logs) in retained
    functions = resources_of(stateless_json, "AWS::Lambda::Function")
    assert any(logical_id.startswith("CustomVpcRestrictDefaultSG") for logical_id in functions)
    for logical_id, function in functions.items():
        if logical_id.startswith(LOG_RETENTION_PROVIDER_ID):
            continue  # its handler gives its own default group a retention of one day
        configured = "LoggingConfig" in function["Properties"]
        assert configured or _lambda_group(logical_id) in retained, logical_id


@pytest.mark.parametrize("stack", ["stateful", "stateless"])
def test_no_log_group_resource_names_a_group_aws_services_create_on_their_own(
    stack: str, request: pytest.FixtureRequest
) -> None:
    """Such a group exists on any stack that has served a request or run the function, so
    declaring it fails the update with "already exists" and rolls the deploy back."""
    template: TemplateJson = request.getfixturevalue(f"{stack}_json")
    assert _service_created_names(template) == []


def test_the_check_finds_a_log_group_declared_by_a_service_created_name(
    small_stack: Stack,
) -> None:
    """A control: declaring API Gateway's execution-log group, or a function's default group,
    is what the check above catches; retaining them instead is not."""
    logs.LogGroup(
        small_stack,
        "ExecutionLogs",
        log_group_name=Fn.join("", ["API-Gateway-Execution-Logs_", "abc123", "/", STAGE_NAME]),
        removal_policy=RemovalPolicy.DESTROY,
    )
    logs.LogGroup(
        small_stack,
        "HandlerLogs",
        log_group_name="/aws/lambda/handler",
        removal_policy=RemovalPolicy.DESTROY,
    )
    retain_service_log_group(
        small_stack,
        "Retained",
        log_group_name="/aws/lambda/other",
        retention=logs.RetentionDays.ONE_WEEK,
    )
    template = small_stack.node.root.synth().get_stack_by_name("Small").template
    found = _service_created_names(template)
    assert len(found) == 2
    assert any("API-Gateway-Execution-Logs_" in name for name in found)
    assert '"/aws/lambda/handler"' in found
