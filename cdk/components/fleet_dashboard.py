"""The operator's CloudWatch dashboard: demand, ownership, churn, throughput and dependencies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Aws, Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.fleet_alarms import TABLE_OPERATIONS
from cdk.components.fleet_metrics import ONE_MINUTE, FleetMetrics
from streamlease.telemetry import AuditorMetric, WorkerMetric

_WIDTH = 8
_HEIGHT = 6


def _graph(
    title: str, left: Sequence[cloudwatch.IMetric], **kwargs: object
) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(
        title=title,
        left=list(left),
        width=_WIDTH,
        height=_HEIGHT,
        **kwargs,  # type: ignore[arg-type]
    )


class FleetDashboard(Construct):
    """One dashboard with everything the fleet's health is judged by, top to bottom:
    alarms; wanted vs owned streams, orphans, fleet size; per-task load and lease churn;
    throughput and upstream health; the API, the functions, the queue and the table."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: FleetMetrics,
        api: apigw.RestApi,
        functions: Mapping[str, lambda_.IFunction],
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        table: dynamodb.ITableV2,
        alarms: Sequence[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, construct_id)
        worker = metrics.worker
        auditor = metrics.auditor
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24, height=3)
        )
        self.dashboard.add_widgets(
            _graph(
                "Streams: wanted vs owned",
                [
                    auditor(AuditorMetric.STARTED_STREAMS),
                    auditor(AuditorMetric.OWNED_STREAMS),
                ],
            ),
            _graph(
                "Orphaned streams and oldest orphan age (s)",
                [auditor(AuditorMetric.ORPHANED_STREAMS)],
                right=[auditor(AuditorMetric.OLDEST_ORPHAN_AGE_SECONDS)],
            ),
            _graph(
                "Fleet: running tasks and live workers",
                [metrics.running_tasks(), auditor(AuditorMetric.LIVE_WORKERS)],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Owned streams by connection state",
                [
                    auditor(AuditorMetric.CONNECTED_STREAMS),
                    auditor(AuditorMetric.CONNECTING_STREAMS),
                    auditor(AuditorMetric.RETRYING_STREAMS),
                    auditor(AuditorMetric.REJECTED_STREAMS),
                ],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Active connections per task",
                [
                    worker(WorkerMetric.ACTIVE_CONNECTIONS, statistic=stat).with_(
                        label=f"{stat.lower()} per task"
                    )
                    for stat in ("Average", "Maximum", "Minimum")
                ],
            ),
            _graph(
                "Lease churn",
                [
                    worker(WorkerMetric.LEASES_ACQUIRED),
                    worker(WorkerMetric.TAKEOVERS),
                    worker(WorkerMetric.HANDOFFS),
                    worker(WorkerMetric.LEASES_LOST),
                    worker(WorkerMetric.SESSIONS_EXPIRED),
                    worker(WorkerMetric.STREAMS_ENDED),
                ],
            ),
            _graph(
                "Renewal and event-loop lag (ms, p99)",
                [
                    worker(WorkerMetric.RENEWAL_LAG_MS, statistic="p99"),
                    worker(WorkerMetric.EVENT_LOOP_LAG_MS, statistic="p99"),
                ],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Messages per second",
                [
                    cloudwatch.MathExpression(
                        expression="received / PERIOD(received)",
                        using_metrics={"received": worker(WorkerMetric.MESSAGES_RECEIVED)},
                        label="messages/s",
                        period=ONE_MINUTE,
                    )
                ],
            ),
            _graph(
                "Upstream reconnects, sequence gaps, sink errors",
                [
                    worker(WorkerMetric.RECONNECTS),
                    worker(WorkerMetric.SEQ_GAPS),
                    worker(WorkerMetric.SINK_ERRORS),
                ],
            ),
            _graph(
                "Command queue: oldest message age (s) and dead letters",
                [queue.metric_approximate_age_of_oldest_message(period=ONE_MINUTE)],
                right=[
                    dead_letter_queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=ONE_MINUTE, label="dead letters"
                    )
                ],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "API requests, 4xx and 5xx",
                [
                    api.metric_count(statistic="Sum", period=ONE_MINUTE),
                    api.metric_client_error(statistic="Sum", period=ONE_MINUTE),
                    api.metric_server_error(statistic="Sum", period=ONE_MINUTE),
                ],
            ),
            _graph(
                "API latency (ms)",
                [
                    api.metric_latency(statistic=stat, period=ONE_MINUTE, label=f"latency {stat}")
                    for stat in ("p50", "p99")
                ],
            ),
            _graph(
                "Control-plane function errors",
                [
                    fn.metric_errors(statistic="Sum", period=ONE_MINUTE, label=label)
                    for label, fn in functions.items()
                ],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "DynamoDB throttled requests and conditional-check failures",
                [
                    table.metric_throttled_requests_for_operations(
                        operations=list(TABLE_OPERATIONS), period=ONE_MINUTE, label="throttled"
                    )
                ],
                right=[
                    table.metric_conditional_check_failed_requests(
                        statistic="Sum", period=ONE_MINUTE, label="conditional-check failures"
                    )
                ],
            ),
            _graph(
                "DynamoDB consumed capacity (units)",
                [
                    table.metric_consumed_write_capacity_units(statistic="Sum", period=ONE_MINUTE),
                    table.metric_consumed_read_capacity_units(statistic="Sum", period=ONE_MINUTE),
                ],
            ),
        )
        self.url = (
            f"https://{Aws.REGION}.console.aws.amazon.com/cloudwatch/home?region={Aws.REGION}"
            f"#dashboards:name={self.dashboard.dashboard_name}"
        )
