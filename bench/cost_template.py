"""What a configuration deploys, counted from its synthesized templates: the alarms and the
metrics they watch, dashboards, API method metrics, scheduled Lambda invocations, traced
functions, flow logs and log groups. The bill prices these counts, not constants.

Synthesizing needs the Lambda code asset (``make lambda``; ``make bench`` builds it).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from aws_cdk import App

from cdk.app import PRESET_KEY, REPO_ROOT, build, config_from_context, context_key
from cdk.config import DeploymentConfig
from cdk.presets import Preset, sized_for

TARGET_TRACKING_ALARMS: Final = 2
"""Alarms Application Auto Scaling creates for a target-tracking policy (high and low)."""
API_METHOD_METRICS: Final = 5
"""Detailed metrics API Gateway publishes per method with ``MetricsEnabled`` (Count, 4XXError,
5XXError, Latency, IntegrationLatency; the cache's two only with a cache)."""
_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")
_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}

Template = dict[str, Any]


@dataclass(frozen=True)
class Deployed:
    """Counts from one configuration's two templates."""

    config: DeploymentConfig
    alarms: int
    """CloudWatch alarms: the template's and those target tracking creates."""
    alarm_metrics: int
    """Metrics those alarms watch (an alarm is billed per metric it evaluates)."""
    dashboards: int
    api_method_metrics: int
    """Detailed API metrics billed as custom metrics in each hour a method is called."""
    scheduled_invocations_per_month: float
    """Lambda invocations of scheduled rules (the auditor's minute), a month."""
    traced_functions: int
    flow_logs: bool
    log_groups: int
    log_groups_without_retention: int


def synthesize(context: Mapping[str, Any]) -> tuple[DeploymentConfig, Template, Template]:
    """The configuration and the (stateful, stateless) templates of the app with ``context``
    over ``cdk.json``'s, cdk-nag attached."""
    base = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    merged = {**base, **context}
    with tempfile.TemporaryDirectory(prefix="bench-cdk-") as out:
        app = App(context=merged, outdir=out)
        deployment = build(app)
        app.synth()
        templates = [
            json.loads((Path(out) / stack.template_file).read_text())
            for stack in (deployment.stateful, deployment.stateless)
        ]
    return config_from_context(merged), templates[0], templates[1]


def deployed(preset: str, context: Mapping[str, Any] | None = None) -> Deployed:
    """What ``preset`` (with ``context`` on top) deploys, counted."""
    config, stateful, stateless = synthesize({PRESET_KEY: preset, **(context or {})})
    return count(config, [stateful, stateless])


def deployed_as_sized(preset: Preset, sizing: Mapping[str, Any]) -> Deployed:
    """What ``preset`` deploys when its fields are what ``sizing`` (a run's
    :func:`~bench.cost_model.sizing`) makes of them: the bill prices the configuration its own
    measurement sizes, which the stored presets are held to (``tests/infra/test_presets.py``)."""
    fields = sized_for(preset, sizing)
    return deployed(preset, {context_key(name): value for name, value in fields.items()})


def count(config: DeploymentConfig, templates: list[Template]) -> Deployed:
    """The counts of :class:`Deployed` from ``templates``."""
    resources = [r for t in templates for r in t["Resources"].values()]

    def of(kind: str) -> list[dict[str, Any]]:
        return [r.get("Properties", {}) for r in resources if r["Type"] == kind]

    alarms = of("AWS::CloudWatch::Alarm")
    alarm_metrics = sum(
        sum(1 for m in a["Metrics"] if "MetricStat" in m) if "Metrics" in a else 1 for a in alarms
    )
    tracking = [
        p for p in of("AWS::ApplicationAutoScaling::ScalingPolicy") if "TargetTracking" in str(p)
    ]
    for policy in tracking:
        spec = policy["TargetTrackingScalingPolicyConfiguration"]
        custom = spec.get("CustomizedMetricSpecification", {})
        stats = sum(1 for m in custom.get("Metrics", []) if "MetricStat" in m) or 1
        alarm_metrics += TARGET_TRACKING_ALARMS * stats
    methods = [m for m in of("AWS::ApiGateway::Method") if m.get("HttpMethod") != "OPTIONS"]
    metrics_on = any(
        s.get("MetricsEnabled") for stage in of("AWS::ApiGateway::Stage") for s in _settings(stage)
    )
    invocations = 0.0
    for rule in of("AWS::Events::Rule"):
        match = _RATE.fullmatch(rule.get("ScheduleExpression", ""))
        if match:
            every = int(match.group(1)) * _SECONDS[match.group(2).rstrip("s")]
            invocations += 730 * 3600 / every * len(rule.get("Targets", []))
    groups = of("AWS::Logs::LogGroup")
    return Deployed(
        config=config,
        alarms=len(alarms) + TARGET_TRACKING_ALARMS * len(tracking),
        alarm_metrics=alarm_metrics,
        dashboards=len(of("AWS::CloudWatch::Dashboard")),
        api_method_metrics=len(methods) * API_METHOD_METRICS if metrics_on else 0,
        scheduled_invocations_per_month=invocations,
        traced_functions=sum(
            1
            for f in of("AWS::Lambda::Function")
            if f.get("TracingConfig", {}).get("Mode") == "Active"
        ),
        flow_logs=bool(of("AWS::EC2::FlowLog")),
        log_groups=len(groups),
        log_groups_without_retention=sum(1 for g in groups if "RetentionInDays" not in g),
    )


def _settings(stage: dict[str, Any]) -> list[dict[str, Any]]:
    return list(stage.get("MethodSettings", []))
