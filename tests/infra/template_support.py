"""Helpers for reading synthesized templates (as dicts) in the infrastructure tests."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import cx_api
from aws_cdk.assertions import Template

from cdk.app import Deployment

TemplateJson = dict[str, Any]
"""A synthesized CloudFormation template as a dict."""


@dataclass(frozen=True)
class Synthesized:
    """The app, its cloud assembly and the template of each stack."""

    deployment: Deployment
    assembly: cx_api.CloudAssembly
    directory: Path
    stateful: Template
    stateless: Template
    stateful_json: dict[str, Any]
    stateless_json: dict[str, Any]


def resources_of(template: TemplateJson, resource_type: str) -> dict[str, dict[str, Any]]:
    """Logical id → resource (``Type``, ``Properties``, ...) of every ``resource_type``."""
    return {
        logical_id: body
        for logical_id, body in template["Resources"].items()
        if body["Type"] == resource_type
    }


def only_resource(template: TemplateJson, resource_type: str) -> tuple[str, dict[str, Any]]:
    """Logical id and body of the one resource of ``resource_type``; fails unless exactly one."""
    found = resources_of(template, resource_type)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found.items()))


def properties_of(template: TemplateJson, resource_type: str) -> dict[str, Any]:
    """``Properties`` of the one resource of ``resource_type``."""
    return dict(only_resource(template, resource_type)[1]["Properties"])


def flat(value: Any) -> str:
    """A CloudFormation value (intrinsics included) as compact JSON, for substring checks."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def statements_of(template: TemplateJson, policy_logical_id_prefix: str) -> list[dict[str, Any]]:
    """Statements of the ``AWS::IAM::Policy`` whose logical id starts with the prefix."""
    policies = [
        body
        for logical_id, body in resources_of(template, "AWS::IAM::Policy").items()
        if logical_id.startswith(policy_logical_id_prefix)
    ]
    assert len(policies) == 1, f"expected one policy {policy_logical_id_prefix}*"
    return list(policies[0]["Properties"]["PolicyDocument"]["Statement"])


def actions_of(statement: dict[str, Any]) -> set[str]:
    """The statement's actions as a set (CloudFormation allows a string or a list)."""
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def resources_in(statement: dict[str, Any]) -> list[Any]:
    """The statement's resources as a list."""
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


def container_of(template: TemplateJson, name: str = "worker") -> dict[str, Any]:
    """The task definition's container named ``name`` (the worker, unless another is asked)."""
    containers = properties_of(template, "AWS::ECS::TaskDefinition")["ContainerDefinitions"]
    (container,) = [c for c in containers if c["Name"] == name]
    return dict(container)


def environment_of(template: TemplateJson, name: str = "worker") -> dict[str, Any]:
    """The environment variables of the container named ``name``."""
    return {e["Name"]: e["Value"] for e in container_of(template, name)["Environment"]}


_METRIC_MATH_IF = re.compile(r"^IF\((?P<condition>.+), (?P<then>[^,]+), (?P<otherwise>[^,]+)\)$")


def evaluate_alarm_expression(expression: str, values: dict[str, float]) -> float:
    """The value of a CloudWatch metric-math ``IF(condition, a, b)`` of comparisons joined by
    ``OR``/``AND`` and arithmetic, with each metric id replaced by ``values[id]``. Raises
    ``ValueError`` for an expression of another shape."""
    match = _METRIC_MATH_IF.match(expression.strip())
    if match is None:
        raise ValueError(f"not an IF(condition, a, b) expression: {expression!r}")
    condition = match["condition"].replace(" OR ", " or ").replace(" AND ", " and ")
    names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", condition)) - {"or", "and"}
    if names - values.keys():
        raise ValueError(f"no value for {sorted(names - values.keys())} in {expression!r}")
    holds = eval(condition, {"__builtins__": {}}, dict(values))
    return float(match["then"] if holds else match["otherwise"])


def scaling_policies(template: TemplateJson) -> dict[str, dict[str, Any]]:
    """The worker service's target-tracking policies' properties, by what they track:
    ``cpu`` (the tasks' average CPU) and ``streams`` (wanted streams per running task)."""
    by_kind: dict[str, dict[str, Any]] = {}
    for body in resources_of(template, "AWS::ApplicationAutoScaling::ScalingPolicy").values():
        config = body["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        kind = "cpu" if "PredefinedMetricSpecification" in config else "streams"
        by_kind[kind] = body["Properties"]
    return by_kind


def lease_table_properties(stack: Any, indexes: Any) -> dict[str, Any]:
    """The table's ``Properties`` once an on-demand lease table with ``indexes`` (a
    :class:`~cdk.config.TableIndexes` layout) is added to ``stack``."""
    from aws_cdk.assertions import Template

    from cdk.components.lease_table import LeaseTable
    from cdk.config import BillingMode, CapacityRange

    LeaseTable(
        stack,
        "Leases",
        billing=BillingMode.ON_DEMAND,
        provisioned_read=CapacityRange(1, 1),
        provisioned_write=CapacityRange(1, 1),
        indexes=indexes,
    )
    return properties_of(Template.from_stack(stack).to_json(), "AWS::DynamoDB::GlobalTable")
