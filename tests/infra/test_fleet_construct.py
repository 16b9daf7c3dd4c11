"""The worker fleet: network, cluster, task definition, service, task role and image."""

from __future__ import annotations

import json
import re
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template
from template_support import (
    Synthesized,
    TemplateJson,
    actions_of,
    container_of,
    environment_of,
    flat,
    properties_of,
    resources_in,
    resources_of,
    statements_of,
)

from cdk.components.network import Network
from cdk.components.trace_collector import COLLECTOR_IMAGE
from cdk.config import DeploymentConfig, NetworkingMode
from streamlease import telemetry
from streamlease.settings import Settings, env_name


def test_container_gets_two_minutes_to_drain(stateless_json: TemplateJson) -> None:
    """ECS waits 120 s between SIGTERM and SIGKILL; the worker's budget stays inside it."""
    assert container_of(stateless_json)["StopTimeout"] == 120
    budget = float(environment_of(stateless_json)[env_name("shutdown_budget_seconds")])
    assert 0 < budget < 120


def test_container_health_check_runs_the_worker_probe(stateless_json: TemplateJson) -> None:
    """ECS replaces a task whose event loop stopped touching the health file."""
    health = container_of(stateless_json)["HealthCheck"]
    assert health["Command"] == ["CMD", "python", "-m", "worker.health"]
    assert health["Retries"] >= 2
    assert health["StartPeriod"] > 0


def test_container_logs_to_a_log_group_with_retention(stateless_json: TemplateJson) -> None:
    """awslogs, non-blocking, into an explicit log group that expires."""
    logging = container_of(stateless_json)["LogConfiguration"]
    assert logging["LogDriver"] == "awslogs"
    assert logging["Options"]["mode"] == "non-blocking"
    log_group = stateless_json["Resources"][logging["Options"]["awslogs-group"]["Ref"]]
    assert log_group["Properties"]["RetentionInDays"] == 30


def test_worker_environment_names_every_resource_and_setting(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Table, queue, stream, Kinesis sink, region and lease/fleet settings, by their names."""
    env = environment_of(stateless_json)
    assert "LeaseTable" in flat(env[env_name("table_name")])
    assert "CommandQueue" in flat(env[env_name("queue_url")])
    assert "SinkStream" in flat(env[env_name("kinesis_stream_name")])
    assert env[env_name("sink")] == "kinesis"
    assert env[env_name("aws_region")] == {"Ref": "AWS::Region"}
    assert float(env[env_name("lease_seconds")]) == config.lease_seconds
    assert float(env[env_name("heartbeat_seconds")]) == config.heartbeat_seconds
    assert float(env[env_name("reconcile_seconds")]) == config.reconcile_seconds
    assert int(env[env_name("capacity")]) == config.capacity_per_worker
    assert env[env_name("allowed_hosts")] == ",".join(config.allowed_upstream_hosts)
    assert env[env_name("metrics_namespace")] == config.metrics_namespace
    assert env["POWERTOOLS_SERVICE_NAME"] == telemetry.WORKER_SERVICE


def test_service_deploys_without_losing_capacity_and_rolls_back(
    stateless_json: TemplateJson,
) -> None:
    """Min healthy 100 %, max 200 %, circuit breaker with rollback."""
    service = properties_of(stateless_json, "AWS::ECS::Service")
    assert service["DeploymentConfiguration"] == {
        "DeploymentCircuitBreaker": {"Enable": True, "Rollback": True},
        "MaximumPercent": 200,
        "MinimumHealthyPercent": 100,
    }
    assert service["LaunchType"] == "FARGATE"
    assert "DesiredCount" not in service, "the scaling policy owns the task count"


def test_service_runs_in_public_subnets_with_public_ips_by_default(
    stateless_json: TemplateJson,
) -> None:
    """Default networking: public subnets, a public IP per task, no NAT gateway."""
    network = properties_of(stateless_json, "AWS::ECS::Service")["NetworkConfiguration"]
    assert network["AwsvpcConfiguration"]["AssignPublicIp"] == "ENABLED"
    assert resources_of(stateless_json, "AWS::EC2::NatGateway") == {}


def test_worker_security_group_opens_no_inbound_port(stateless_json: TemplateJson) -> None:
    """Workers only dial out."""
    group = properties_of(stateless_json, "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in group
    assert resources_of(stateless_json, "AWS::EC2::SecurityGroupIngress") == {}


def test_cluster_has_container_insights_off_by_default(stateless_json: TemplateJson) -> None:
    """Off in every preset (its ~30 custom metrics are not in the bill): scaling, the Headroom
    alarm and the dashboard count the auditor's LiveWorkers (``streamlease:containerInsights=true``
    turns it on, and they count its RunningTaskCount)."""
    cluster = properties_of(stateless_json, "AWS::ECS::Cluster")
    assert {"Name": "containerInsights", "Value": "disabled"} in cluster["ClusterSettings"]


def test_vpc_has_a_dynamodb_gateway_endpoint_and_a_flow_log(stateless_json: TemplateJson) -> None:
    """Lease traffic stays on the AWS network; every flow is logged."""
    endpoint = properties_of(stateless_json, "AWS::EC2::VPCEndpoint")
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert ".dynamodb" in flat(endpoint["ServiceName"])
    flow_log = properties_of(stateless_json, "AWS::EC2::FlowLog")
    assert flow_log["TrafficType"] == "ALL"
    assert flow_log["ResourceType"] == "VPC"


def test_private_networking_puts_tasks_behind_nat(small_stack: Stack) -> None:
    """The private option: private subnets with egress through one NAT gateway per AZ."""
    network = Network(
        small_stack,
        "Network",
        mode=NetworkingMode.PRIVATE,
        log_retention=logs.RetentionDays.ONE_DAY,
    )
    assert network.assign_public_ip is False
    template = Template.from_stack(small_stack)
    template.resource_count_is("AWS::EC2::NatGateway", 2)
    selected = network.vpc.select_subnets(subnet_type=network.worker_subnets.subnet_type).subnets
    private = {subnet.subnet_id for subnet in network.vpc.private_subnets}
    assert selected
    assert {subnet.subnet_id for subnet in selected} == private


def test_task_role_reaches_exactly_the_table_its_indexes_the_queue_and_the_stream(
    stateless_json: TemplateJson,
) -> None:
    """Every statement names one of the four resources; no wildcard resource, no other service
    (tests/infra/test_grants.py checks the actions on each)."""
    statements = statements_of(stateless_json, "WorkersTaskDefinitionTaskRole")
    by_service: dict[str, list[Any]] = {}
    for statement in statements:
        assert statement["Effect"] == "Allow"
        services = {action.split(":")[0] for action in actions_of(statement)}
        assert len(services) == 1, statement
        by_service.setdefault(services.pop(), []).extend(resources_in(statement))
    assert set(by_service) == {"dynamodb", "sqs", "kinesis"}
    assert all("LeaseTable" in flat(r) for r in by_service["dynamodb"])
    assert not any(flat(r).endswith('"/index/*"]]}') for r in by_service["dynamodb"])
    assert all("CommandQueueArn" in flat(r) for r in by_service["sqs"])
    assert all("DeadLetter" not in flat(r) for r in by_service["sqs"])
    assert all("SinkStreamArn" in flat(r) for r in by_service["kinesis"])


def test_task_role_may_receive_send_and_write_the_sink(stateless_json: TemplateJson) -> None:
    """The worker polls and sends (handoff) commands, updates leases and puts records."""
    statements = statements_of(stateless_json, "WorkersTaskDefinitionTaskRole")
    actions = set().union(*map(actions_of, statements))
    assert {
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:SendMessage",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "kinesis:PutRecords",
    } <= actions
    assert not any(action.endswith("*") for action in actions)


def test_image_is_built_from_the_worker_dockerfile(synthesized: Synthesized) -> None:
    """The image asset uses worker/Dockerfile with the repository root as context."""
    (image,) = _docker_assets(synthesized)
    assert image["source"]["dockerFile"] == "worker/Dockerfile"


def test_image_context_holds_only_what_the_image_needs(synthesized: Synthesized) -> None:
    """.dockerignore keeps .venv, node_modules, cdk.out, build, tests, ... out of the context."""
    (image,) = _docker_assets(synthesized)
    staged = synthesized.directory / image["source"]["directory"]
    top_level = {path.name for path in staged.iterdir()}
    assert top_level == {".dockerignore", "requirements.lock", "streamlease", "worker"}
    assert not list(staged.rglob("__pycache__"))
    assert (staged / "worker" / "Dockerfile").is_file()


def _docker_assets(synthesized: Synthesized) -> list[dict[str, Any]]:
    artifact_id = synthesized.deployment.stateless.artifact_id
    manifest = synthesized.directory / f"{artifact_id}.assets.json"
    return list(json.loads(manifest.read_text())["dockerImages"].values())


def test_a_trace_collector_beside_the_worker_sends_its_spans_to_xray(
    stateless_json: TemplateJson,
) -> None:
    """The worker exports OTLP to localhost; the ADOT collector there (a pinned release, not
    essential) receives it on that one port and exports traces to X-Ray only."""
    collector = container_of(stateless_json, "trace-collector")
    assert collector["Image"] == COLLECTOR_IMAGE
    assert re.search(r":v\d+\.\d+\.\d+$", collector["Image"])
    assert collector["Essential"] is False
    (variable,) = collector["Environment"]
    assert collector["Command"] == [f"--config=env:{variable['Name']}"]
    config = variable["Value"]
    assert "endpoint: 127.0.0.1:4318" in config
    assert "exporters: [awsxray]" in config
    assert "grpc" not in config
    worker = environment_of(stateless_json)
    assert worker[env_name("trace_export")] == "otlp"
    assert env_name("trace_otlp_endpoint") not in worker  # the default: the collector's port
    assert Settings().trace_otlp_endpoint == "http://127.0.0.1:4318/v1/traces"


def test_the_task_role_may_send_trace_segments_and_nothing_else_to_xray(
    stateless_json: TemplateJson,
) -> None:
    """The collector's one permission: PutTraceSegments (and telemetry records)."""
    (statement,) = statements_of(stateless_json, "WorkersTraceSegments")
    assert actions_of(statement) == {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
