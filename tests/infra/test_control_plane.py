"""The control plane: the API, its Lambdas, their grants and the events that drive them."""

from __future__ import annotations

from typing import Any

import pytest
from template_support import (
    TemplateJson,
    actions_of,
    flat,
    properties_of,
    resources_in,
    resources_of,
    statements_of,
)

from cdk.config import DeploymentConfig
from streamlease import telemetry
from streamlease.settings import env_name

FUNCTIONS = {
    # logical id prefix: (handler, Powertools service name)
    "ApiFunction": ("lambdas.api.handler", telemetry.API_SERVICE),
    "ReaperFunction": ("lambdas.reaper.handler", telemetry.REAPER_SERVICE),
    "AuditorFunction": ("lambdas.auditor.handler", telemetry.AUDITOR_SERVICE),
}
EXPECTED_ROUTES = {
    ("POST", "/streams"),
    ("GET", "/streams"),
    ("GET", "/streams/{id}"),
    ("PATCH", "/streams/{id}"),
    ("DELETE", "/streams/{id}"),
    ("POST", "/streams/{id}/stop"),
    ("POST", "/streams/{id}/start"),
    ("GET", "/workers"),
}


def _function(template: TemplateJson, name: str) -> tuple[str, dict[str, Any]]:
    """Logical id and body of the one function running the handler of ``FUNCTIONS[name]``."""
    handler = FUNCTIONS[name][0]
    found = [
        (logical_id, body)
        for logical_id, body in resources_of(template, "AWS::Lambda::Function").items()
        if body["Properties"].get("Handler") == handler
    ]
    assert len(found) == 1, f"expected one function running {handler}"
    return found[0]


def _methods(template: TemplateJson) -> dict[str, dict[str, Any]]:
    return {
        logical_id: body["Properties"]
        for logical_id, body in resources_of(template, "AWS::ApiGateway::Method").items()
    }


def _route_paths(template: TemplateJson) -> dict[str, str]:
    """Logical id of every API resource → its full path."""
    resources = resources_of(template, "AWS::ApiGateway::Resource")

    def path(logical_id: str) -> str:
        props = resources[logical_id]["Properties"]
        parent = props["ParentId"]
        prefix = path(parent["Ref"]) if "Ref" in parent else ""
        return f"{prefix}/{props['PathPart']}"

    return {logical_id: path(logical_id) for logical_id in resources}


@pytest.mark.parametrize("prefix", sorted(FUNCTIONS))
def test_function_runs_its_handler_on_python_3_12_arm64(
    stateless_json: TemplateJson, prefix: str
) -> None:
    """API, reaper and auditor run their ``lambdas.<name>.handler`` on the asset's platform."""
    _, body = _function(stateless_json, prefix)
    props = body["Properties"]
    assert props["Runtime"] == "python3.12"
    assert props["Architectures"] == ["arm64"]
    assert props["TracingConfig"] == {"Mode": "Active"}


@pytest.mark.parametrize("prefix", sorted(FUNCTIONS))
def test_function_environment_names_powertools_service_and_settings(
    stateless_json: TemplateJson, prefix: str, config: DeploymentConfig
) -> None:
    """Powertools service/namespace and the settings the handlers read are set by their names."""
    _, body = _function(stateless_json, prefix)
    variables = body["Properties"]["Environment"]["Variables"]
    assert variables["POWERTOOLS_SERVICE_NAME"] == FUNCTIONS[prefix][1]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == config.metrics_namespace
    assert variables[env_name("metrics_namespace")] == config.metrics_namespace
    assert "LeaseTable" in flat(variables[env_name("table_name")])
    assert "CommandQueue" in flat(variables[env_name("queue_url")])
    assert variables[env_name("aws_region")] == {"Ref": "AWS::Region"}
    assert variables[env_name("allowed_hosts")] == ",".join(config.allowed_upstream_hosts)


@pytest.mark.parametrize("prefix", sorted(FUNCTIONS))
def test_function_logs_to_its_own_log_group_with_retention(
    stateless_json: TemplateJson, prefix: str
) -> None:
    """Each function has an explicit log group that expires (30 days by default)."""
    _, body = _function(stateless_json, prefix)
    log_group_id = body["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    log_group = stateless_json["Resources"][log_group_id]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["RetentionInDays"] == 30


def test_functions_use_no_aws_managed_policy(stateless_json: TemplateJson) -> None:
    """The function roles carry no managed policy (no account-wide log access)."""
    for logical_id, role in resources_of(stateless_json, "AWS::IAM::Role").items():
        if any(logical_id.startswith(prefix) for prefix in FUNCTIONS):
            assert "ManagedPolicyArns" not in role["Properties"], logical_id


def test_auditor_may_only_read_the_table(stateless_json: TemplateJson) -> None:
    """The auditor gets no write action and no queue access."""
    actions = set().union(*map(actions_of, statements_of(stateless_json, "AuditorFunctionRole")))
    assert {a for a in actions if a.startswith("dynamodb:")} >= {"dynamodb:Query"}
    writes = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    assert actions.isdisjoint(writes)
    assert not any(action.startswith("sqs:") for action in actions)


@pytest.mark.parametrize("prefix", ["ApiFunctionRole", "ReaperFunctionRole"])
def test_api_and_reaper_may_write_the_table_and_send_commands(
    stateless_json: TemplateJson, prefix: str
) -> None:
    """The API and the reaper update leases and send start/handoff commands, nothing more."""
    statements = statements_of(stateless_json, prefix)
    actions = set().union(*map(actions_of, statements))
    assert {"dynamodb:UpdateItem", "sqs:SendMessage"} <= actions
    assert "sqs:ReceiveMessage" not in actions
    for statement in statements:
        for resource in resources_in(statement):
            if resource == "*":
                assert actions_of(statement) <= {
                    "xray:PutTraceSegments",
                    "xray:PutTelemetryRecords",
                }


def test_api_routes_are_exactly_the_documented_ones(stateless_json: TemplateJson) -> None:
    """POST/GET /streams, GET/DELETE /streams/{id}, stop, start and GET /workers."""
    paths = _route_paths(stateless_json)
    routes = {
        (props["HttpMethod"], paths[props["ResourceId"]["Ref"]])
        for props in _methods(stateless_json).values()
    }
    assert routes == EXPECTED_ROUTES


def test_every_method_requires_iam_and_is_validated(stateless_json: TemplateJson) -> None:
    """No method is reachable without SigV4, and each goes through the request validator."""
    methods = _methods(stateless_json)
    assert methods
    for logical_id, props in methods.items():
        assert props["AuthorizationType"] == "AWS_IAM", logical_id
        assert "Ref" in props["RequestValidatorId"], logical_id


def test_every_method_is_a_proxy_to_the_api_function(stateless_json: TemplateJson) -> None:
    """Each route is a Lambda proxy integration of the API function."""
    api_id, _ = _function(stateless_json, "ApiFunction")
    for logical_id, props in _methods(stateless_json).items():
        assert props["Integration"]["Type"] == "AWS_PROXY", logical_id
        assert api_id in flat(props["Integration"]["Uri"]), logical_id


def test_request_validator_checks_bodies_and_parameters(stateless_json: TemplateJson) -> None:
    """The validator validates request bodies (against the model) and required parameters."""
    validator = properties_of(stateless_json, "AWS::ApiGateway::RequestValidator")
    assert validator["ValidateRequestBody"] is True
    assert validator["ValidateRequestParameters"] is True
    model = properties_of(stateless_json, "AWS::ApiGateway::Model")["Schema"]
    assert sorted(model["required"]) == ["id", "ws_url"]


def test_stage_is_throttled_and_logged_without_bodies(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Stage throttling, access logs, error-level execution logs and no data traces."""
    stage = properties_of(stateless_json, "AWS::ApiGateway::Stage")
    (settings,) = stage["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == config.api_rate_limit_per_second
    assert settings["ThrottlingBurstLimit"] == config.api_burst_limit
    assert settings["LoggingLevel"] == "ERROR"
    assert settings["DataTraceEnabled"] is False
    assert "DestinationArn" in stage["AccessLogSetting"]
    assert "$context.requestId" in stage["AccessLogSetting"]["Format"]
    assert stage["TracingEnabled"] is True


def test_task_stopped_events_of_this_cluster_go_to_the_reaper(stateless_json: TemplateJson) -> None:
    """ECS task state changes to STOPPED in the worker cluster invoke the reaper."""
    reaper_id, _ = _function(stateless_json, "ReaperFunction")
    cluster_id = next(iter(resources_of(stateless_json, "AWS::ECS::Cluster")))
    rules = [
        rule["Properties"]
        for rule in resources_of(stateless_json, "AWS::Events::Rule").values()
        if "EventPattern" in rule["Properties"]
    ]
    assert len(rules) == 1
    (rule,) = rules
    assert rule["EventPattern"] == {
        "source": ["aws.ecs"],
        "detail-type": ["ECS Task State Change"],
        "detail": {
            "clusterArn": [{"Fn::GetAtt": [cluster_id, "Arn"]}],
            "lastStatus": ["STOPPED"],
        },
    }
    assert [t["Arn"] for t in rule["Targets"]] == [{"Fn::GetAtt": [reaper_id, "Arn"]}]


def test_undeliverable_task_stopped_events_go_to_the_reapers_dead_letter_queue(
    stateless_json: TemplateJson,
) -> None:
    """The reaper's target retries for minutes, then puts the event in a dead-letter queue."""
    (rule,) = [
        body["Properties"]
        for body in resources_of(stateless_json, "AWS::Events::Rule").values()
        if "EventPattern" in body["Properties"]
    ]
    (target,) = rule["Targets"]
    queue_id = _reaper_dead_letter_queue(stateless_json)
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue_id, "Arn"]}}
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 300


def test_failed_reaper_runs_go_to_an_on_failure_destination(stateless_json: TemplateJson) -> None:
    """Lambda retries a failing reaper run, then records it in the same dead-letter queue."""
    reaper_id, _ = _function(stateless_json, "ReaperFunction")
    configs = resources_of(stateless_json, "AWS::Lambda::EventInvokeConfig")
    (config,) = [c["Properties"] for c in configs.values() if reaper_id in flat(c)]
    queue_id = _reaper_dead_letter_queue(stateless_json)
    assert config["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": [queue_id, "Arn"]
    }
    assert config["MaximumRetryAttempts"] == 2
    reaper_actions = set().union(
        *map(actions_of, statements_of(stateless_json, "ReaperFunctionRole"))
    )
    assert "sqs:SendMessage" in reaper_actions


def test_checkov_is_told_why_the_reaper_has_no_function_dead_letter_queue(
    stateless_json: TemplateJson,
) -> None:
    """checkov's function-DLQ check (CKV_AWS_116) reads only DeadLetterConfig: the reaper's
    on-failure destination is named in its skip, so the finding is gone with a reason."""
    _, body = _function(stateless_json, "ReaperFunction")
    (skip,) = body["Metadata"]["checkov"]["skip"]
    assert skip["id"] == "CKV_AWS_116"
    assert "on-failure destination" in skip["comment"]


def _reaper_dead_letter_queue(template: TemplateJson) -> str:
    (queue_id,) = [
        logical_id
        for logical_id in resources_of(template, "AWS::SQS::Queue")
        if logical_id.startswith("EventsReaperDeadLetters")
    ]
    return queue_id


def test_auditor_runs_every_minute(stateless_json: TemplateJson) -> None:
    """A schedule rule invokes the auditor once a minute."""
    auditor_id, _ = _function(stateless_json, "AuditorFunction")
    schedules = [
        rule["Properties"]
        for rule in resources_of(stateless_json, "AWS::Events::Rule").values()
        if "ScheduleExpression" in rule["Properties"]
    ]
    assert [s["ScheduleExpression"] for s in schedules] == ["rate(1 minute)"]
    assert [t["Arn"] for t in schedules[0]["Targets"]] == [{"Fn::GetAtt": [auditor_id, "Arn"]}]


def test_api_url_is_an_output(stateless_json: TemplateJson) -> None:
    """The stack prints the URL the CLI's ``--api`` takes."""
    outputs = stateless_json["Outputs"]
    assert "ApiUrl" in outputs
    assert "execute-api" in flat(outputs["ApiUrl"]["Value"])
