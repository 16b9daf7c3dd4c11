"""Operations: alarms, their topic, the dashboard and the stack outputs."""

from __future__ import annotations

from typing import Any

import pytest
from template_support import TemplateJson, flat, properties_of, resources_of

from cdk.config import DeploymentConfig
from streamlease import telemetry
from streamlease.telemetry import AuditorMetric, WorkerMetric


def _alarm(template: TemplateJson, logical_id_prefix: str) -> dict[str, Any]:
    found = [
        body["Properties"]
        for logical_id, body in resources_of(template, "AWS::CloudWatch::Alarm").items()
        if logical_id.startswith(logical_id_prefix)
    ]
    assert len(found) == 1, f"expected one alarm {logical_id_prefix}*"
    return found[0]


def test_orphan_alarm_fires_after_five_minutes_of_orphans(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """OrphanedStreams > 0 in each of five one-minute periods, on the auditor's dimension."""
    alarm = _alarm(stateless_json, "AlarmsOrphans")
    assert alarm["Namespace"] == config.metrics_namespace
    assert alarm["MetricName"] == AuditorMetric.ORPHANED_STREAMS
    assert alarm["Dimensions"] == [
        {"Name": telemetry.SERVICE_DIMENSION, "Value": telemetry.AUDITOR_SERVICE}
    ]
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (60, 5, 5)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_rejected_streams_alarm_after_five_minutes(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Streams owned but refused by their upstream look healthy by ownership: their own alarm."""
    alarm = _alarm(stateless_json, "AlarmsRejectedStreams")
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        config.metrics_namespace,
        AuditorMetric.REJECTED_STREAMS,
    )
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (60, 5)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_leases_lost_alarm_watches_the_workers_metric(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Any lost lease alarms; the metric carries the worker's service dimension."""
    alarm = _alarm(stateless_json, "AlarmsLeasesLost")
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        config.metrics_namespace,
        WorkerMetric.LEASES_LOST,
    )
    assert alarm["Dimensions"] == [
        {"Name": telemetry.SERVICE_DIMENSION, "Value": telemetry.WORKER_SERVICE}
    ]
    assert alarm["Statistic"] == "Sum"


def test_dead_letter_alarm_fires_on_any_dead_letter(stateless_json: TemplateJson) -> None:
    """A visible message in the DLQ alarms within a minute."""
    alarm = _alarm(stateless_json, "AlarmsDeadLetters")
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert "CommandDeadLetterQueue" in flat(alarm["Dimensions"])
    assert (alarm["Threshold"], alarm["EvaluationPeriods"]) == (0, 1)


def test_reaper_dead_letter_alarm_fires_on_any_lost_task_event(
    stateless_json: TemplateJson,
) -> None:
    """A task-stopped event the reaper could not handle alarms within a minute."""
    alarm = _alarm(stateless_json, "AlarmsReaperDeadLetters")
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert "EventsReaperDeadLetters" in flat(alarm["Dimensions"])
    assert (alarm["Threshold"], alarm["EvaluationPeriods"]) == (0, 1)


def test_api_5xx_alarm(stateless_json: TemplateJson) -> None:
    """Any API 5xx in five minutes alarms."""
    alarm = _alarm(stateless_json, "AlarmsApiServerErrors")
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/ApiGateway", "5XXError")


def test_throttling_alarm_covers_the_lease_table(stateless_json: TemplateJson) -> None:
    """Throttled requests on the table's operations alarm."""
    alarm = _alarm(stateless_json, "AlarmsTableThrottling")
    text = flat(alarm["Metrics"])
    assert "ThrottledRequests" in text
    assert "UpdateItem" in text
    assert "LeaseTable" in text


def test_every_alarm_notifies_the_topic_when_firing_and_clearing(
    stateless_json: TemplateJson,
) -> None:
    """Alarm and OK actions publish to the one alarm topic."""
    (topic_id,) = resources_of(stateless_json, "AWS::SNS::Topic")
    alarms = resources_of(stateless_json, "AWS::CloudWatch::Alarm")
    assert len(alarms) >= 5
    for logical_id, alarm in alarms.items():
        props = alarm["Properties"]
        assert props["AlarmActions"] == [{"Ref": topic_id}], logical_id
        assert props["OKActions"] == [{"Ref": topic_id}], logical_id
        assert props["AlarmDescription"], logical_id


def test_alarm_topic_refuses_publishing_without_tls(stateless_json: TemplateJson) -> None:
    """The topic policy denies publishes that do not use TLS."""
    policy = properties_of(stateless_json, "AWS::SNS::TopicPolicy")
    assert any(
        statement["Effect"] == "Deny"
        and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for statement in policy["PolicyDocument"]["Statement"]
    )


def _dashboard_body(template: TemplateJson) -> str:
    return flat(properties_of(template, "AWS::CloudWatch::Dashboard")["DashboardBody"])


@pytest.mark.parametrize(
    "metric_name",
    [
        AuditorMetric.STARTED_STREAMS,
        AuditorMetric.OWNED_STREAMS,
        AuditorMetric.ORPHANED_STREAMS,
        AuditorMetric.OLDEST_ORPHAN_AGE_SECONDS,
        WorkerMetric.ACTIVE_CONNECTIONS,
        WorkerMetric.TAKEOVERS,
        WorkerMetric.HANDOFFS,
        WorkerMetric.LEASES_LOST,
        WorkerMetric.MESSAGES_RECEIVED,
        WorkerMetric.RECONNECTS,
        "4XXError",
        "5XXError",
        "Latency",
        "Errors",
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
        "ThrottledRequests",
        "ConditionalCheckFailedRequests",
        "RunningTaskCount",
    ],
)
def test_dashboard_shows(stateless_json: TemplateJson, metric_name: str) -> None:
    """The dashboard graphs each metric an operator judges the fleet by."""
    assert f'\\"{metric_name}\\"' in _dashboard_body(stateless_json)


def test_dashboard_custom_metrics_carry_their_emitters_service_dimension(
    stateless_json: TemplateJson,
) -> None:
    """Every Streamlease-namespace metric on the dashboard names the service that emits it."""
    body = _dashboard_body(stateless_json)
    worker = f'\\"service\\",\\"{telemetry.WORKER_SERVICE}\\"'
    auditor = f'\\"service\\",\\"{telemetry.AUDITOR_SERVICE}\\"'
    assert body.count('[\\"Streamlease\\"') == body.count(worker) + body.count(auditor)
    assert body.count(worker) > 0 and body.count(auditor) > 0


def test_outputs_api_and_dashboard_urls(stateless_json: TemplateJson) -> None:
    """The deploy prints where the API and the dashboard are."""
    outputs = stateless_json["Outputs"]
    assert "execute-api" in flat(outputs["ApiUrl"]["Value"])
    dashboard_id = next(iter(resources_of(stateless_json, "AWS::CloudWatch::Dashboard")))
    url = flat(outputs["DashboardUrl"]["Value"])
    assert "console.aws.amazon.com/cloudwatch" in url
    assert f'{{"Ref":"{dashboard_id}"}}' in url
