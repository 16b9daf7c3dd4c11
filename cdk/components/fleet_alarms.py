"""Alarms an operator must hear about, published to one TLS-only SNS topic.

A pager must be able to trust silence. So every alarm on the auditor's metrics treats missing
data as breaching: if the auditor stops (or its schedule does), they fire instead of going
quiet. Alarms on metrics that exist only when something happens (worker counters, ECS stop
events, Kinesis throttling, errors) treat missing data as nothing having happened; that the
workers themselves are gone is what ``LiveWorkersLow`` (an auditor alarm) says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from aws_cdk import Acknowledgment, Annotations, Duration, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.fleet_metrics import ONE_MINUTE, FleetMetrics
from streamlease.schema import ConnectionState
from streamlease.telemetry import (
    STREAMS_BY_CONNECTION_STATE,
    AuditorMetric,
    ReaperMetric,
    WorkerMetric,
)

FIVE_MINUTES = Duration.minutes(5)
CONSUMER_ITERATOR_AGE_MS = 10 * 60 * 1000
TABLE_OPERATIONS = (
    dynamodb.Operation.GET_ITEM,
    dynamodb.Operation.PUT_ITEM,
    dynamodb.Operation.UPDATE_ITEM,
    dynamodb.Operation.DELETE_ITEM,
    dynamodb.Operation.QUERY,
    dynamodb.Operation.SCAN,
)
"""The table operations streamlease performs; throttling is watched on each."""

ALARMED_TROUBLE_STATES = (
    ConnectionState.REJECTED,
    ConnectionState.STALLED,
    ConnectionState.MALFORMED,
    ConnectionState.SINK_FAILING,
)
"""Trouble states whose streams page someone when they last: nothing is delivered and nothing
will be without a person. ``retrying`` is left out: a large fleet always has a few streams
reconnecting after a drop, each briefly (the dashboard shows them)."""

TROUBLE_MINUTES = 5
"""Streams in trouble this long, in every minute, raise ``StreamsInTrouble``."""
CRASH_LOOP_STOPS = 3
CRASH_LOOP_WINDOW = Duration.minutes(15)
"""This many unplanned task stops within the window are a crash loop (one is a crash the
reaper has already cleaned up after)."""

NO_SUBSCRIBER_WARNING = (
    "The alarm topic has no subscriber: alarms will fire and nobody will hear them. Deploy "
    "with -c streamlease:alarmEmail=ops@example.com (confirm the email AWS sends), or subscribe "
    "your pager to the AlarmTopicArn output."
)


def subscribe(topic: sns.Topic, email: str) -> None:
    """Subscribe ``email`` to ``topic``; without one, warn at synth and deploy time that nobody
    will hear the alarms."""
    if email:
        topic.add_subscription(subscriptions.EmailSubscription(email))
    else:
        Annotations.of(topic).add_warning_v2(
            "streamlease:alarm-topic-unsubscribed", NO_SUBSCRIBER_WARNING
        )


HEADROOM_MINUTES: Final = 10
"""How long the fleet must stay short of headroom before it alarms: scale-out takes a few
minutes by itself."""


class FleetAlarms(Construct):
    """The fleet's alarms, by name in :attr:`by_name` (also their construct ids). Each notifies
    ``topic`` when it fires and when it clears.

    ``min_live_workers``: fewer live workers than this for five minutes alarms (the scaling
    minimum). ``max_tasks`` and ``capacity_per_task``: the fleet at its maximum, or with less
    than one task of spare capacity, for :data:`HEADROOM_MINUTES` alarms.
    ``renewal_lag_limit_ms``: a renewal sent this late is near its holder's fencing deadline (see
    ``DeploymentConfig.renewal_lag_alarm_ms``). ``renewal_answer_age_limit_ms``: a worker whose
    last answered renewal was sent this long ago is near it too, however punctually it sends
    (``DeploymentConfig.renewal_answer_age_alarm_ms``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: FleetMetrics,
        api: apigw.RestApi,
        table: dynamodb.ITableV2,
        dead_letter_queue: sqs.IQueue,
        sink_stream: kinesis.IStream,
        reaper_dead_letter_queue: sqs.IQueue,
        functions: Mapping[str, lambda_.IFunction],
        min_live_workers: int,
        max_tasks: int,
        capacity_per_task: int,
        renewal_lag_limit_ms: int,
        renewal_answer_age_limit_ms: int,
        email: str = "",
        consumer: tuple[lambda_.IFunction, sqs.IQueue] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Topic", enforce_ssl=True)
        subscribe(self.topic, email)
        Validations.of(self.topic).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SNS2",
                reason="The topic carries CloudWatch alarm state changes only (alarm names and "
                "thresholds, no stream data); CloudWatch cannot publish to a topic under the AWS "
                "managed SNS key, and a customer key would be the only KMS key of the app.",
            )
        )
        self.by_name: dict[str, cloudwatch.Alarm] = {}
        auditor = metrics.auditor
        breaching = cloudwatch.TreatMissingData.BREACHING

        # --- the auditor's view: missing data is breaching ------------------------------------
        self._alarm(
            "Orphans",
            auditor(AuditorMetric.ORPHANED_STREAMS),
            evaluation_periods=5,
            missing=breaching,
            description="Wanted streams have had no owner for 5 minutes (or the auditor has "
            "published nothing for as long): workers are at capacity, not running, or failing "
            "to acquire. Check running tasks and the worker logs; scaling may be at its maximum.",
        )
        states = {
            state.value: auditor(STREAMS_BY_CONNECTION_STATE[state])
            for state in ALARMED_TROUBLE_STATES
        }
        self._alarm(
            "StreamsInTrouble",
            cloudwatch.MathExpression(
                # No FILL: if the auditor publishes nothing, neither does the sum (breaching).
                expression=" + ".join(states),
                using_metrics=states,
                period=ONE_MINUTE,
                label="streams rejected, stalled, malformed or sink failing",
            ),
            evaluation_periods=TROUBLE_MINUTES,
            missing=breaching,
            description=f"Owned streams have delivered nothing for {TROUBLE_MINUTES} minutes: "
            "rejected by their upstream, stalled (no frame for their idle threshold), malformed "
            "(no frame deliverable) or their sink failing; or the auditor has published "
            "nothing. `streamlease ls --connection-state STATE` lists them; `streamlease get "
            "ID` says why (last_error).",
        )
        self._alarm(
            "LiveWorkersLow",
            auditor(AuditorMetric.LIVE_WORKERS, statistic="Minimum"),
            threshold=min_live_workers,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=5,
            missing=breaching,
            description=f"Fewer than {min_live_workers} live workers (the scaling minimum) for "
            "5 minutes, or the auditor has published nothing: tasks are crashing, failing to "
            "start, or cannot reach DynamoDB. Check the service's events and stopped tasks.",
        )

        running, wanted = (
            metrics.running_tasks(),
            auditor(AuditorMetric.STARTED_STREAMS, statistic="Average"),
        )
        self._alarm(
            "Headroom",
            cloudwatch.MathExpression(
                # No FILL: without the auditor's wanted streams there is no value (breaching).
                expression=f"IF(tasks >= {max_tasks} OR (tasks * {capacity_per_task} - wanted)"
                f" < {capacity_per_task}, 1, 0)",
                using_metrics={"tasks": running, "wanted": wanted},
                period=ONE_MINUTE,
                label="at max tasks or under one task of spare capacity",
            ),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=HEADROOM_MINUTES,
            missing=breaching,
            description=f"The worker fleet has run at its maximum of {max_tasks} tasks, or with "
            f"less than one task ({capacity_per_task} streams) of spare capacity, for "
            f"{HEADROOM_MINUTES} minutes (or the auditor has published nothing): losing a task "
            "would leave streams unowned. Raise streamlease:maxTasks (and expectedStreams) or "
            "capacityPerWorker.",
        )

        # --- things that happened: missing data is nothing happening --------------------------
        self._alarm(
            "CrashLoop",
            metrics.reaper(ReaperMetric.UNPLANNED_TASK_STOPS, period=CRASH_LOOP_WINDOW),
            threshold=CRASH_LOOP_STOPS,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{CRASH_LOOP_STOPS} or more worker tasks stopped outside a "
            f"deployment or scale-in within {CRASH_LOOP_WINDOW.to_minutes()} minutes (crashed, "
            "failed to start or failed their health check). Read the stopped tasks' reasons in "
            "the ECS console and the last lines of their logs.",
        )
        self._alarm(
            "SinkErrors",
            metrics.worker(WorkerMetric.SINK_ERRORS),
            evaluation_periods=3,
            description="Workers' writes to the sink failed in each of 3 minutes: records are "
            "retried, nothing is delivered meanwhile. Check the workers' 'sink write failed' "
            "log lines and the Kinesis stream (throttling, permissions, KMS).",
        )
        self._alarm(
            "SinkThrottling",
            sink_stream.metric(
                "WriteProvisionedThroughputExceeded", statistic="Sum", period=ONE_MINUTE
            ),
            evaluation_periods=3,
            description="Kinesis throttled writes to the sink stream in each of 3 minutes: "
            "delivery lags. Add shards (provisioned) or check the account's on-demand limits; "
            "a hot partition is one stream writing more than a shard takes.",
        )
        self._alarm(
            "RenewalLag",
            metrics.worker(WorkerMetric.RENEWAL_LAG_MS, statistic="Maximum"),
            threshold=renewal_lag_limit_ms,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            description=f"A worker sent renewals over {renewal_lag_limit_ms} ms late in 2 "
            "of 3 minutes: halfway to the point where it fences itself and pauses every "
            "stream. Check EventLoopLagMs and the tasks' CPU; DynamoDB latency and throttling.",
        )
        self._alarm(
            "RenewalAnswerAge",
            metrics.worker(WorkerMetric.RENEWAL_ANSWER_AGE_MS, statistic="Maximum"),
            threshold=renewal_answer_age_limit_ms,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            description=f"A worker's last answered renewal was sent over "
            f"{renewal_answer_age_limit_ms} ms before, in 2 of 3 minutes: its renewals go out "
            "but no answer comes back (a gray failure; RenewalLagMs stays low), and it is halfway "
            "to fencing itself. It revokes its session past the deadline and exits after four "
            "leases; check the tasks' network path to DynamoDB and DynamoDB latency.",
        )
        self._alarm(
            "DeadLetters",
            dead_letter_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=ONE_MINUTE
            ),
            description="Commands reached the dead-letter queue: they were received too often "
            "without being handled. Read them from the queue before they expire.",
        )
        self._alarm(
            "ReaperDeadLetters",
            reaper_dead_letter_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=ONE_MINUTE
            ),
            description="A stopped task's event could not be handled by the reaper (delivery "
            "or every retry failed): its streams wait for a lease expiry and reconciliation. "
            "Read the message for the task ARN and the error; the reaper's logs say more.",
        )
        self._alarm(
            "LeasesLost",
            metrics.worker(WorkerMetric.LEASES_LOST, period=FIVE_MINUTES),
            description="Workers lost leases they held (renewal failed and the stream was not "
            "stopped): DynamoDB slow or unreachable from the tasks, or event loops stalled. "
            "Check RenewalLagMs and EventLoopLagMs.",
        )
        self._alarm(
            "ApiServerErrors",
            api.metric_server_error(statistic="Sum", period=FIVE_MINUTES),
            description="The control-plane API answered with 5xx. Check the API function's logs.",
        )
        self._alarm(
            "TableThrottling",
            table.metric_throttled_requests_for_operations(
                operations=list(TABLE_OPERATIONS), period=FIVE_MINUTES
            ),
            description="DynamoDB throttled lease-table requests; renewals may be late. Raise "
            "the provisioned capacity bounds or switch the table to on-demand billing.",
        )
        self._alarm(
            "FunctionErrors",
            cloudwatch.MathExpression(
                expression=" + ".join(f"FILL({label}, 0)" for label in functions),
                using_metrics={
                    label: fn.metric_errors(statistic="Sum", period=FIVE_MINUTES)
                    for label, fn in functions.items()
                },
                period=FIVE_MINUTES,
                label="control-plane function errors",
            ),
            description="A control-plane function (API, reaper or auditor) failed. A failing "
            "auditor also fires the auditor alarms (no data); check the functions' logs.",
        )
        if consumer is not None:
            self._consumer_alarms(*consumer)
        action = cw_actions.SnsAction(self.topic)
        for alarm in self.by_name.values():
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)

    def _consumer_alarms(self, function: lambda_.IFunction, failures: sqs.IQueue) -> None:
        """The optional consumer (``streamlease:consumer``): batches given up on, and a shard
        falling behind."""
        self._alarm(
            "ConsumerFailedBatches",
            failures.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=ONE_MINUTE
            ),
            description="The consumer gave up on a batch of the sink stream after its retries: "
            "a record it cannot read (corrupt, not the sink's) or messages its function kept "
            "refusing. Each queue message names the shard and sequence numbers; read them from "
            "the sink (streamlease consume --from TIME) before the stream's retention ends.",
        )
        self._alarm(
            "ConsumerIteratorAge",
            cloudwatch.Metric(
                namespace="AWS/Lambda",
                metric_name="IteratorAge",
                dimensions_map={"FunctionName": function.function_name},
                statistic="Maximum",
                period=FIVE_MINUTES,
            ),
            threshold=CONSUMER_ITERATOR_AGE_MS,
            evaluation_periods=3,
            description="The consumer is over 10 minutes behind the sink stream in 3 periods of"
            " 5 minutes: its function is slow or failing and retrying; records older than the"
            " stream's retention (24 h) are lost to it.",
        )

    @property
    def alarms(self) -> tuple[cloudwatch.Alarm, ...]:
        """Every alarm, in the order they were made."""
        return tuple(self.by_name.values())

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        *,
        description: str,
        threshold: float = 0,
        comparison: cloudwatch.ComparisonOperator = (
            cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        ),
        evaluation_periods: int = 1,
        datapoints_to_alarm: int | None = None,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        """An alarm named ``name`` that fires when ``metric`` compares to ``threshold`` in
        ``datapoints_to_alarm`` (default: all) of the last ``evaluation_periods`` periods."""
        alarm = cloudwatch.Alarm(
            self,
            name,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=datapoints_to_alarm or evaluation_periods,
            treat_missing_data=missing,
            alarm_description=description,
        )
        self.by_name[name] = alarm
        return alarm
