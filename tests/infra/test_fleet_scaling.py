"""Scaling of the worker service on load per task (CPU), capped by wanted streams per task."""

from __future__ import annotations

from typing import Any

from template_support import (
    TemplateJson,
    only_resource,
    properties_of,
    scaling_policies,
)

from cdk.config import DeploymentConfig
from streamlease import telemetry
from streamlease.telemetry import AuditorMetric


def _queries(template: TemplateJson) -> dict[str, dict[str, Any]]:
    policy = scaling_policies(template)["streams"]
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
    policy = scaling_policies(stateless_json)["streams"]
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


def test_load_per_task_scales_the_service_beside_the_stream_count(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Two target-tracking policies on the one scalable target: the tasks' average CPU at the
    target load fraction (heavy streams add tasks though they are few) and streams per task
    (light streams add tasks though the CPU idles); scale-in needs both to allow it. Both
    scale out within a minute and in over five."""
    policies = scaling_policies(stateless_json)
    assert set(policies) == {"cpu", "streams"}
    target_id, _ = only_resource(stateless_json, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert {p["ScalingTargetId"]["Ref"] for p in policies.values()} == {target_id}
    cpu = policies["cpu"]["TargetTrackingScalingPolicyConfiguration"]
    assert cpu["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "ECSServiceAverageCPUUtilization"
    }
    assert cpu["TargetValue"] == config.target_cpu_percent == 100 * config.target_load_fraction
    assert 0 < cpu["TargetValue"] < 100
    for policy in policies.values():
        tracking = policy["TargetTrackingScalingPolicyConfiguration"]
        assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"]) == (60, 300)
        assert tracking.get("DisableScaleIn") in (None, False)
