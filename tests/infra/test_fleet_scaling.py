"""Scaling of the worker service on wanted streams per running task."""

from __future__ import annotations

from typing import Any

from template_support import TemplateJson, properties_of

from cdk.config import DeploymentConfig
from streamlease import telemetry
from streamlease.telemetry import AuditorMetric


def _queries(template: TemplateJson) -> dict[str, dict[str, Any]]:
    policy = properties_of(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    spec = policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
    return {query["Id"]: query for query in spec["Metrics"]}


def test_task_count_stays_between_min_and_max(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """The scalable target keeps at least two tasks (the default) and at most the maximum."""
    target = properties_of(stateless_json, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (target["MinCapacity"], target["MaxCapacity"]) == (config.min_tasks, config.max_tasks)
    assert config.min_tasks >= 2
    assert target["ScalableDimension"] == "ecs:service:DesiredCount"


def test_policy_tracks_a_target_below_per_task_capacity(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Target tracking aims at a fraction of a task's capacity, so tasks keep headroom."""
    policy = properties_of(stateless_json, "AWS::ApplicationAutoScaling::ScalingPolicy")
    assert policy["PolicyType"] == "TargetTrackingScaling"
    target = policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]
    assert target == config.target_streams_per_task
    assert 0 < target < config.capacity_per_worker


def test_policy_divides_wanted_streams_by_live_workers(stateless_json: TemplateJson) -> None:
    """Metric math: the auditor's StartedStreams over its LiveWorkers (the running tasks that
    can hold streams; Container Insights is off by default)."""
    queries = _queries(stateless_json)
    assert queries["load"] == {
        "Expression": "wanted / tasks",
        "Id": "load",
        "Label": "wanted streams per running task",
        "ReturnData": True,
    }
    assert [q["Id"] for q in queries.values() if q["ReturnData"]] == ["load"]
    tasks = queries["tasks"]["MetricStat"]["Metric"]
    assert (tasks["Namespace"], tasks["MetricName"]) == (
        DeploymentConfig().metrics_namespace,
        AuditorMetric.LIVE_WORKERS,
    )
    assert {d["Name"] for d in tasks["Dimensions"]} == {"service"}


def test_wanted_streams_metric_has_the_auditors_namespace_and_service_dimension(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Powertools adds ``service``; without the same dimension the policy would see no data."""
    wanted = _queries(stateless_json)["wanted"]["MetricStat"]["Metric"]
    assert wanted == {
        "Namespace": config.metrics_namespace,
        "MetricName": AuditorMetric.STARTED_STREAMS,
        "Dimensions": [{"Name": telemetry.SERVICE_DIMENSION, "Value": telemetry.AUDITOR_SERVICE}],
    }
