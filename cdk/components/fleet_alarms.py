"""Alarms an operator must hear about, published to one TLS-only SNS topic."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.fleet_metrics import FleetMetrics
from streamlease.telemetry import AuditorMetric, WorkerMetric

FIVE_MINUTES = Duration.minutes(5)
TABLE_OPERATIONS = (
    dynamodb.Operation.GET_ITEM,
    dynamodb.Operation.PUT_ITEM,
    dynamodb.Operation.UPDATE_ITEM,
    dynamodb.Operation.DELETE_ITEM,
    dynamodb.Operation.QUERY,
    dynamodb.Operation.SCAN,
)
"""The table operations streamlease performs; throttling is watched on each."""


class FleetAlarms(Construct):
    """Alarms on orphaned streams, lost leases, dead letters, API 5xx, DynamoDB throttling and
    control-plane Lambda errors. Each notifies ``topic`` when it fires and when it clears."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: FleetMetrics,
        api: apigw.RestApi,
        table: dynamodb.ITableV2,
        dead_letter_queue: sqs.IQueue,
        reaper_dead_letter_queue: sqs.IQueue,
        functions: Mapping[str, lambda_.IFunction],
        email: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Topic", enforce_ssl=True)
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        Validations.of(self.topic).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SNS2",
                reason="The topic carries CloudWatch alarm state changes only (alarm names and "
                "thresholds, no stream data); CloudWatch cannot publish to a topic under the AWS "
                "managed SNS key, and a customer key would be the only KMS key of the app.",
            )
        )
        action = cw_actions.SnsAction(self.topic)

        self.orphans = self._alarm(
            "Orphans",
            metrics.auditor(AuditorMetric.ORPHANED_STREAMS),
            evaluation_periods=5,
            description="Wanted streams have had no owner for 5 minutes: workers are at "
            "capacity, not running, or failing to acquire. Check running tasks and the worker "
            "logs; scaling may be at its maximum.",
        )
        self.rejected = self._alarm(
            "RejectedStreams",
            metrics.auditor(AuditorMetric.REJECTED_STREAMS),
            evaluation_periods=5,
            description="Owned streams whose upstream refuses them (a 4xx at the handshake or a "
            "forbidden address) for 5 minutes: they are held and retried slowly, nothing flows. "
            "GET the stream for last_error; fix its credentials or URL, or stop it.",
        )
        self.dead_letters = self._alarm(
            "DeadLetters",
            dead_letter_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=Duration.minutes(1)
            ),
            description="Commands reached the dead-letter queue: they were received too often "
            "without being handled. Read them from the queue before they expire.",
        )
        self.reaper_dead_letters = self._alarm(
            "ReaperDeadLetters",
            reaper_dead_letter_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=Duration.minutes(1)
            ),
            description="A stopped task's event could not be handled by the reaper (delivery "
            "or every retry failed): its streams wait for a lease expiry and reconciliation. "
            "Read the message for the task ARN and the error; the reaper's logs say more.",
        )
        self.leases_lost = self._alarm(
            "LeasesLost",
            metrics.worker(WorkerMetric.LEASES_LOST, period=FIVE_MINUTES),
            description="Workers lost leases they held (renewal failed and the stream was not "
            "stopped): DynamoDB slow or unreachable from the tasks, or event loops stalled. "
            "Check RenewalLagMs and EventLoopLagMs.",
        )
        self.api_errors = self._alarm(
            "ApiServerErrors",
            api.metric_server_error(statistic="Sum", period=FIVE_MINUTES),
            description="The control-plane API answered with 5xx. Check the API function's logs.",
        )
        self.throttling = self._alarm(
            "TableThrottling",
            table.metric_throttled_requests_for_operations(
                operations=list(TABLE_OPERATIONS), period=FIVE_MINUTES
            ),
            description="DynamoDB throttled lease-table requests; renewals may be late. Raise "
            "the provisioned capacity bounds or switch the table to on-demand billing.",
        )
        self.function_errors = self._alarm(
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
            "auditor also silences the orphan alarm; check the functions' logs.",
        )
        self.alarms = (
            self.orphans,
            self.rejected,
            self.dead_letters,
            self.reaper_dead_letters,
            self.leases_lost,
            self.api_errors,
            self.throttling,
            self.function_errors,
        )
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        description: str,
        evaluation_periods: int = 1,
    ) -> cloudwatch.Alarm:
        """An alarm that fires when ``metric`` is above zero in every one of the periods."""
        return cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
