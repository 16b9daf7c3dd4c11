"""The fleet's size from measurements, its headroom alarm, and the options that change the bill:
Fargate Spot, private networking through VPC endpoints with one or two NAT gateways, a
provisioned sink stream of other shards and Container Insights on. The defaults are checked on
the app as ``cdk.json`` configures it; the options on one more synth of the whole app with all
of them on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App
from template_support import (
    TemplateJson,
    container_of,
    environment_of,
    flat,
    properties_of,
    resources_of,
    scaling_policies,
)

from cdk.app import REPO_ROOT, build, config_from_context
from cdk.config import HEADROOM_FACTOR, DeploymentConfig, min_max_tasks
from streamlease.settings import env_name
from streamlease.telemetry import AUDITOR_SERVICE, AuditorMetric

CDK_CONTEXT: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


def test_default_fleet_holds_one_and_a_half_times_its_streams_with_one_task_lost(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """At its maximum, less one task, the fleet's capacity (the workers' capacity setting × the
    scalable target's maximum) is at least 1.5 × the streams it is sized for."""
    target = properties_of(stateless_json, "AWS::ApplicationAutoScaling::ScalableTarget")
    capacity = int(environment_of(stateless_json)[env_name("capacity")])
    assert (target["MaxCapacity"] - 1) * capacity >= HEADROOM_FACTOR * config.expected_streams
    assert config.expected_streams >= 1000


def test_default_task_is_the_smallest_arm64_size(stateless_json: TemplateJson) -> None:
    """0.25 vCPU and 0.5 GB on Graviton: the bench's CPU and memory per stream put the default
    capacity at a fraction of it."""
    task = properties_of(stateless_json, "AWS::ECS::TaskDefinition")
    assert (task["Cpu"], task["Memory"]) == ("256", "512")
    assert task["RuntimePlatform"]["CpuArchitecture"] == "ARM64"


def test_headroom_alarm_fires_at_max_tasks_or_under_one_task_of_spare_capacity(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    (alarm,) = [
        a
        for a in resources_of(stateless_json, "AWS::CloudWatch::Alarm").values()
        if "spare capacity" in flat(a["Properties"].get("AlarmDescription", ""))
    ]
    props = alarm["Properties"]
    (expression,) = [m["Expression"] for m in props["Metrics"] if "Expression" in m]
    assert f"tasks >= {config.max_tasks}" in expression
    assert f"tasks * {config.capacity_per_worker} - wanted" in expression
    assert props["AlarmActions"] and props["OKActions"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {
                "streamlease:capacityPerWorker": 1000,
                "streamlease:minTasks": 2,
                "streamlease:maxTasks": 2,
            },
            "max_tasks must be at least 3",
        ),
        (
            {"streamlease:capacityPerWorker": 1000, "streamlease:expectedStreams": 3000},
            "max_tasks must be at least 6",
        ),
        ({"streamlease:natGateways": 3}, "nat_gateways must be 1 or 2"),
    ],
)
def test_config_refuses_a_fleet_without_headroom_or_with_nat_gateways_out_of_range(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_context({**CDK_CONTEXT, **changes})


def test_min_max_tasks_is_the_headroom_rule() -> None:
    assert min_max_tasks(1000, 150) == 11  # 10 × 150 = 1,500
    assert min_max_tasks(1000, 300) == 6
    assert min_max_tasks(1000, 100) == 16


OPTIONS = {
    "streamlease:networking": "private",
    "streamlease:natGateways": 1,
    "streamlease:fargateSpot": True,
    "streamlease:sinkCapacity": "provisioned",
    "streamlease:sinkShards": 3,
    "streamlease:containerInsights": True,
}


@pytest.fixture(scope="module")
def with_options(tmp_path_factory: pytest.TempPathFactory) -> tuple[TemplateJson, TemplateJson]:
    """(stateful, stateless) templates of the app with every option of :data:`OPTIONS` on (and
    cdk-nag attached: a finding fails the synth)."""
    directory = tmp_path_factory.mktemp("cdk-options.out")
    app = App(context={**CDK_CONTEXT, **OPTIONS}, outdir=str(directory))
    deployment = build(app)
    app.synth()
    return tuple(  # type: ignore[return-value]
        json.loads((directory / stack.template_file).read_text())
        for stack in (deployment.stateful, deployment.stateless)
    )


def test_private_mode_reaches_aws_through_endpoints_and_upstreams_through_one_nat(
    with_options: tuple[TemplateJson, TemplateJson],
) -> None:
    """Interface endpoints for what the worker calls, gateway endpoints for DynamoDB and S3,
    and the one NAT gateway asked for."""
    _, stateless = with_options
    endpoints = [e["Properties"] for e in resources_of(stateless, "AWS::EC2::VPCEndpoint").values()]
    interface = {
        flat(e["ServiceName"]).rsplit(".", 1)[-1].strip('"]}')
        for e in endpoints
        if e["VpcEndpointType"] == "Interface"
    }
    gateway = {
        flat(e["ServiceName"]).rsplit(".", 1)[-1].strip('"]}')
        for e in endpoints
        if e["VpcEndpointType"] == "Gateway"
    }
    assert {"kinesis-streams", "sqs", "logs", "api", "dkr", "secretsmanager"} <= interface
    assert gateway == {"dynamodb", "s3"}
    assert all(e.get("PrivateDnsEnabled") for e in endpoints if e["VpcEndpointType"] == "Interface")
    assert len(resources_of(stateless, "AWS::EC2::NatGateway")) == 1


def test_spot_runs_the_tasks_beyond_the_minimum_half_on_fargate_spot(
    with_options: tuple[TemplateJson, TemplateJson],
) -> None:
    _, stateless = with_options
    service = properties_of(stateless, "AWS::ECS::Service")
    strategy = {s["CapacityProvider"]: s for s in service["CapacityProviderStrategy"]}
    assert strategy["FARGATE"]["Base"] == DeploymentConfig().min_tasks
    assert strategy["FARGATE_SPOT"]["Weight"] == strategy["FARGATE"]["Weight"] == 1
    assert "LaunchType" not in service
    cluster = properties_of(stateless, "AWS::ECS::ClusterCapacityProviderAssociations")
    assert set(cluster["CapacityProviders"]) == {"FARGATE", "FARGATE_SPOT"}


SPOT_NOTICE_SECONDS = 120
"""Fargate Spot's warning before it stops a task (the SIGTERM comes with it)."""


def test_a_spot_task_drains_within_spots_two_minute_notice(
    with_options: tuple[TemplateJson, TemplateJson],
) -> None:
    """With Spot on, ECS's stop timeout fits in Spot's notice and the worker's shutdown budget
    fits in the stop timeout, so an interrupted task drains before it is killed."""
    _, stateless = with_options
    container = container_of(stateless)
    budget = float(environment_of(stateless)[env_name("shutdown_budget_seconds")])
    assert budget < container["StopTimeout"] <= SPOT_NOTICE_SECONDS


def test_provisioned_sink_stream_has_the_shards_asked_for(
    with_options: tuple[TemplateJson, TemplateJson],
) -> None:
    stateful, _ = with_options
    stream = properties_of(stateful, "AWS::Kinesis::Stream")
    assert stream["StreamModeDetails"] == {"StreamMode": "PROVISIONED"}
    assert stream["ShardCount"] == 3


def test_on_demand_sink_stream_has_no_shards(tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("cdk-on-demand.out")
    app = App(
        context={**CDK_CONTEXT, "streamlease:sinkCapacity": "on-demand"}, outdir=str(directory)
    )
    deployment = build(app)
    app.synth()
    stateful = json.loads((directory / deployment.stateful.template_file).read_text())
    stream = properties_of(stateful, "AWS::Kinesis::Stream")
    assert stream["StreamModeDetails"] == {"StreamMode": "ON_DEMAND"}
    assert "ShardCount" not in stream


def test_with_container_insights_scaling_and_headroom_count_running_tasks(
    with_options: tuple[TemplateJson, TemplateJson],
) -> None:
    """On, Container Insights publishes RunningTaskCount: scaling and the Headroom alarm
    divide by it."""
    _, stateless = with_options
    cluster = properties_of(stateless, "AWS::ECS::Cluster")
    assert {"Name": "containerInsights", "Value": "enabled"} in cluster["ClusterSettings"]
    policy = scaling_policies(stateless)["streams"]
    spec = policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
    tasks = {q["Id"]: q for q in spec["Metrics"]}["tasks"]["MetricStat"]["Metric"]
    assert (tasks["Namespace"], tasks["MetricName"]) == (
        "ECS/ContainerInsights",
        "RunningTaskCount",
    )
    assert {d["Name"] for d in tasks["Dimensions"]} == {"ClusterName", "ServiceName"}


def test_without_container_insights_scaling_and_headroom_count_live_workers(
    stateless_json: TemplateJson,
) -> None:
    """Off (the default), the cluster publishes no ``ECS/ContainerInsights`` metric, so nothing
    may watch one: the scaling policy and the Headroom alarm divide by the auditor's
    LiveWorkers, and the dashboard still draws the live workers and the service's CPU and
    memory."""
    stateless = stateless_json
    cluster = properties_of(stateless, "AWS::ECS::Cluster")
    assert {"Name": "containerInsights", "Value": "disabled"} in cluster["ClusterSettings"]
    assert "ContainerInsights" not in flat(
        {
            **resources_of(stateless, "AWS::CloudWatch::Alarm"),
            **resources_of(stateless, "AWS::CloudWatch::Dashboard"),
            **resources_of(stateless, "AWS::ApplicationAutoScaling::ScalingPolicy"),
        }
    )
    live_workers = {
        "Namespace": DeploymentConfig().metrics_namespace,
        "MetricName": AuditorMetric.LIVE_WORKERS,
        "Dimensions": [{"Name": "service", "Value": AUDITOR_SERVICE}],
    }
    policy = scaling_policies(stateless)["streams"]
    spec = policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
    queries = {q["Id"]: q for q in spec["Metrics"]}
    assert queries["tasks"]["MetricStat"]["Metric"] == live_workers
    (headroom,) = [
        a["Properties"]
        for a in resources_of(stateless, "AWS::CloudWatch::Alarm").values()
        if "spare capacity" in flat(a["Properties"].get("AlarmDescription", ""))
    ]
    (tasks,) = [m for m in headroom["Metrics"] if m["Id"] == "tasks"]
    assert tasks["MetricStat"]["Metric"]["MetricName"] == AuditorMetric.LIVE_WORKERS
    body = flat(properties_of(stateless, "AWS::CloudWatch::Dashboard")["DashboardBody"])
    assert AuditorMetric.LIVE_WORKERS in body and "CPUUtilization" in body
