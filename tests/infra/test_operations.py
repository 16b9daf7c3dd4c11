"""Operations: alarms, their topic, the dashboard and the stack outputs."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template
from template_support import Synthesized, TemplateJson, flat, properties_of, resources_of

from cdk.components.dashboard_widgets import ROWS
from cdk.components.fleet_alarms import subscribe
from cdk.config import DeploymentConfig
from streamlease import telemetry
from streamlease.settings import Settings
from streamlease.telemetry import AuditorMetric, ReaperMetric, WorkerMetric


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


ALARM_IDS = (
    "Orphans",
    "StreamsInTrouble",
    "LiveWorkersLow",
    "CrashLoop",
    "SinkErrors",
    "SinkThrottling",
    "RenewalLag",
    "RenewalAnswerAge",
    "DeadLetters",
    "LeasesLost",
    "ApiServerErrors",
    "TableThrottling",
    "FunctionErrors",
)


def _watched(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics an alarm watches: its own, or those of its math expression."""
    if "MetricName" in alarm:
        return [{k: alarm[k] for k in ("Namespace", "MetricName", "Dimensions")}]
    return [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]


def _is_auditors(metric: dict[str, Any]) -> bool:
    return {"Name": telemetry.SERVICE_DIMENSION, "Value": telemetry.AUDITOR_SERVICE} in metric.get(
        "Dimensions", []
    )


def test_every_auditor_alarm_fires_when_the_auditor_goes_quiet(
    stateless_json: TemplateJson,
) -> None:
    """Missing auditor data is breaching: if the auditor stops, its alarms fire instead of
    going quiet. (There are four: orphans, streams in trouble, live workers, headroom.)"""
    alarms = resources_of(stateless_json, "AWS::CloudWatch::Alarm")
    auditor_alarms = {
        logical_id: body["Properties"]
        for logical_id, body in alarms.items()
        if any(_is_auditors(m) for m in _watched(body["Properties"]))
    }
    assert len(auditor_alarms) == 4
    for logical_id, props in auditor_alarms.items():
        assert props["TreatMissingData"] == "breaching", logical_id


def test_streams_in_trouble_alarm_sums_the_auditors_per_state_counts(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Rejected + stalled + malformed + sink failing > 0 in each of five minutes, without
    FILL (no auditor data must stay no data, hence breaching)."""
    alarm = _alarm(stateless_json, "AlarmsStreamsInTrouble")
    watched = _watched(alarm)
    assert {m["MetricName"] for m in watched} == {
        AuditorMetric.REJECTED_STREAMS,
        AuditorMetric.STALLED_STREAMS,
        AuditorMetric.MALFORMED_STREAMS,
        AuditorMetric.SINK_FAILING_STREAMS,
    }
    assert all(_is_auditors(m) and m["Namespace"] == config.metrics_namespace for m in watched)
    (expression,) = [m for m in alarm["Metrics"] if m.get("ReturnData", True)]
    ids = {m["Id"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert set(expression["Expression"].split(" + ")) == ids
    assert "FILL" not in expression["Expression"]
    stats = {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert stats == {60}
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (5, 5)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert alarm["TreatMissingData"] == "breaching"


def test_live_workers_below_the_scaling_minimum_alarm(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """LiveWorkers (the auditor's minimum each minute) below min_tasks for five minutes."""
    alarm = _alarm(stateless_json, "AlarmsLiveWorkersLow")
    assert (alarm["MetricName"], alarm["Statistic"]) == (AuditorMetric.LIVE_WORKERS, "Minimum")
    assert _is_auditors(alarm)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (
        config.min_tasks,
        "LessThanThreshold",
    )
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (60, 5, 5)
    assert alarm["TreatMissingData"] == "breaching"


def test_crash_loop_alarm_counts_the_reapers_unplanned_stops(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Three task stops outside deployments within 15 minutes; no stops, no data: quiet."""
    alarm = _alarm(stateless_json, "AlarmsCrashLoop")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        config.metrics_namespace,
        ReaperMetric.UNPLANNED_TASK_STOPS,
        "Sum",
    )
    assert alarm["Dimensions"] == [
        {"Name": telemetry.SERVICE_DIMENSION, "Value": telemetry.REAPER_SERVICE}
    ]
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (900, 1)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (
        3,
        "GreaterThanOrEqualToThreshold",
    )
    assert alarm["TreatMissingData"] == "notBreaching"


def test_sink_errors_alarm_on_the_workers_metric(stateless_json: TemplateJson) -> None:
    """Sink write failures in each of three minutes."""
    alarm = _alarm(stateless_json, "AlarmsSinkErrors")
    assert (alarm["MetricName"], alarm["Statistic"]) == (WorkerMetric.SINK_ERRORS, "Sum")
    assert alarm["Dimensions"] == [
        {"Name": telemetry.SERVICE_DIMENSION, "Value": telemetry.WORKER_SERVICE}
    ]
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (60, 3, 3)
    assert (alarm["Threshold"], alarm["TreatMissingData"]) == (0, "notBreaching")


def test_sink_throttling_alarm_on_the_kinesis_stream(stateless_json: TemplateJson) -> None:
    """Kinesis throttled writes to the sink stream in each of three minutes."""
    alarm = _alarm(stateless_json, "AlarmsSinkThrottling")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "AWS/Kinesis",
        "WriteProvisionedThroughputExceeded",
        "Sum",
    )
    assert "SinkStream" in flat(alarm["Dimensions"])
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (60, 3, 3)
    assert (alarm["Threshold"], alarm["TreatMissingData"]) == (0, "notBreaching")


def test_renewal_lag_alarm_is_halfway_to_the_fencing_deadline(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Max RenewalLagMs above (lease − fence margin − heartbeat) / 2 in 2 of 3 minutes: 6.5 s
    at the defaults (20 s lease, 2 s margin, 5 s heartbeat)."""
    alarm = _alarm(stateless_json, "AlarmsRenewalLag")
    assert (alarm["MetricName"], alarm["Statistic"]) == (WorkerMetric.RENEWAL_LAG_MS, "Maximum")
    room_ms = config.lease_seconds - Settings().fence_margin_seconds - config.heartbeat_seconds
    assert alarm["Threshold"] == room_ms * 1000 / 2 == 6500
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (60, 3, 2)
    assert alarm["TreatMissingData"] == "notBreaching"


def test_renewal_answer_age_alarm_sees_a_gray_failure_halfway_to_the_fencing_deadline(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Max RenewalAnswerAgeMs above heartbeat + (lease − fence margin − heartbeat) / 2 in 2 of 3
    minutes: 11.5 s at the defaults, halfway from a healthy age (a heartbeat) to the fencing
    deadline (18 s), where renewals sent on time leave RenewalLagMs low."""
    alarm = _alarm(stateless_json, "AlarmsRenewalAnswerAge")
    assert (alarm["MetricName"], alarm["Statistic"]) == (
        WorkerMetric.RENEWAL_ANSWER_AGE_MS,
        "Maximum",
    )
    healthy_ms = config.heartbeat_seconds * 1000
    fenced_ms = (config.lease_seconds - Settings().fence_margin_seconds) * 1000
    assert alarm["Threshold"] == (healthy_ms + fenced_ms) / 2 == 11500
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (60, 3, 2)
    assert alarm["TreatMissingData"] == "notBreaching"


def test_the_alarms_are_these(stateless_json: TemplateJson) -> None:
    """One alarm of each name (room for more: the list is not exhaustive of the future)."""
    for name in ALARM_IDS:
        _alarm(stateless_json, f"Alarms{name}")


def test_deploying_without_a_subscriber_warns(synthesized: Synthesized) -> None:
    """cdk.json sets no alarmEmail: synth (and so deploy) prints a warning saying so."""
    annotations = Annotations.from_stack(synthesized.deployment.stateless)
    annotations.has_warning("*", Match.string_like_regexp("alarm topic has no subscriber"))


def test_an_alarm_email_is_subscribed_and_nothing_is_warned(small_stack: Stack) -> None:
    """With an address, the topic has its email subscription and there is no warning."""
    topic = sns.Topic(small_stack, "Topic")
    subscribe(topic, "ops@example.com")
    template = Template.from_stack(small_stack)
    template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )
    Annotations.from_stack(small_stack).has_no_warning("*", Match.any_value())


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
        WorkerMetric.SINK_ERRORS,
        WorkerMetric.RENEWAL_LAG_MS,
        WorkerMetric.RENEWAL_ANSWER_AGE_MS,
        WorkerMetric.MALFORMED_FRAMES,
        WorkerMetric.CHECKPOINT_SLOTS_LOST,
        WorkerMetric.SESSION_ROLLOVERS,
        AuditorMetric.LIVE_WORKERS,
        AuditorMetric.REJECTED_STREAMS,
        AuditorMetric.STALLED_STREAMS,
        AuditorMetric.MALFORMED_STREAMS,
        AuditorMetric.SINK_FAILING_STREAMS,
        AuditorMetric.RETRYING_STREAMS,
        AuditorMetric.TROUBLE_STREAMS,
        ReaperMetric.UNPLANNED_TASK_STOPS,
        "CPUUtilization",
        "MemoryUtilization",
        "IncomingRecords",
        "WriteProvisionedThroughputExceeded",
        "4XXError",
        "5XXError",
        "Latency",
        "Errors",
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
        "ThrottledRequests",
        "ConditionalCheckFailedRequests",
        "LiveWorkers",
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
    services = (telemetry.WORKER_SERVICE, telemetry.AUDITOR_SERVICE, telemetry.REAPER_SERVICE)
    counts = [body.count(f'\\"service\\",\\"{service}\\"') for service in services]
    assert body.count('[\\"Streamlease\\"') == sum(counts)
    assert all(counts)


def test_dashboard_has_a_widget_per_graph_and_draws_alarm_thresholds(
    stateless_json: TemplateJson, config: DeploymentConfig
) -> None:
    """Every graph of the shared widget list is on the dashboard (after the alarm row), and
    the live-worker graph shows the minimum the alarm watches."""
    body = json.loads(
        "".join(
            part if isinstance(part, str) else "x"
            for part in properties_of(stateless_json, "AWS::CloudWatch::Dashboard")[
                "DashboardBody"
            ]["Fn::Join"][1]
        )
    )
    titles = [w["properties"].get("title") for w in body["widgets"]]
    assert titles == ["Alarms"] + [graph.title for row in ROWS for graph in row]
    fleet = next(w for w in body["widgets"] if w["properties"].get("title", "").startswith("Fleet"))
    annotations = fleet["properties"]["annotations"]["horizontal"]
    assert [a["value"] for a in annotations] == [config.min_tasks]


def test_outputs_api_and_dashboard_urls(stateless_json: TemplateJson) -> None:
    """The deploy prints where the API and the dashboard are."""
    outputs = stateless_json["Outputs"]
    assert "execute-api" in flat(outputs["ApiUrl"]["Value"])
    dashboard_id = next(iter(resources_of(stateless_json, "AWS::CloudWatch::Dashboard")))
    url = flat(outputs["DashboardUrl"]["Value"])
    assert "console.aws.amazon.com/cloudwatch" in url
    assert f'{{"Ref":"{dashboard_id}"}}' in url


def _dashboard_widgets(template: TemplateJson) -> dict[str, dict[str, Any]]:
    """The dashboard's widgets by title (tokens replaced by ``x``)."""
    parts = properties_of(template, "AWS::CloudWatch::Dashboard")["DashboardBody"]["Fn::Join"][1]
    body = json.loads("".join(part if isinstance(part, str) else "x" for part in parts))
    return {w["properties"].get("title", ""): w["properties"] for w in body["widgets"]}


def test_dashboard_counts_takeovers_wherever_they_happen(stateless_json: TemplateJson) -> None:
    """The takeovers line adds a worker's takeovers and the reaper's releases of a crashed
    task's streams (each a takeover on the stream item), not LeasesAcquired."""
    events = _dashboard_widgets(stateless_json)[
        "Events: unplanned task stops, takeovers, sessions lost"
    ]
    expressions = [m[0] for m in events["metrics"] if isinstance(m[0], dict)]
    takeovers = next(e for e in expressions if e["label"].startswith("takeovers"))
    ids = {m[-1].get("id"): m[1] for m in events["metrics"] if not isinstance(m[0], dict)}
    named = {ids[part] for part in re.findall(r"FILL\((\w+), 0\)", takeovers["expression"])}
    assert named == {WorkerMetric.TAKEOVERS, ReaperMetric.LEASES_RELEASED}


def test_dashboard_marks_events_and_keeps_seconds_off_the_milliseconds_axis(
    stateless_json: TemplateJson,
) -> None:
    """Events shade everything above zero red; the renewal answer age has its own axis; every
    legend entry says its last, min and max."""
    widgets = _dashboard_widgets(stateless_json)
    events = widgets["Events: unplanned task stops, takeovers, sessions lost"]
    [band] = events["annotations"]["horizontal"]
    assert (band["value"], band["fill"]) == (0.5, "above")
    lag = next(w for title, w in widgets.items() if title.startswith("Renewal and event-loop"))
    on_right = [m for m in lag["metrics"] if m[-1].get("yAxis") == "right"]
    assert [m[1] for m in on_right] == [WorkerMetric.RENEWAL_ANSWER_AGE_MS]
    drawn = [m[-1] for w in widgets.values() for m in w.get("metrics", [])]
    labels = [m["label"] for m in drawn if m.get("visible", True)]
    assert labels and all(label.endswith("max ${MAX})") for label in labels)
