"""The fleet's CloudWatch metrics, with the namespace and dimensions their emitters use."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs

from streamlease import telemetry

ONE_MINUTE = Duration.minutes(1)
CONTAINER_INSIGHTS_NAMESPACE = "ECS/ContainerInsights"
ECS_NAMESPACE = "AWS/ECS"


class FleetMetrics:
    """Factory of the metrics the worker and the Lambdas publish (Powertools EMF), and of the
    worker service's ECS metrics.

    Powertools adds a ``service`` dimension to every metric, so each metric here carries the
    emitter's service name from :mod:`streamlease.telemetry`; without it an alarm or scaling
    policy would watch a metric that never gets data. ``container_insights``: whether the
    cluster publishes Container Insights (``ECS/ContainerInsights``); without it
    :meth:`running_tasks` counts live workers.
    """

    def __init__(
        self,
        *,
        namespace: str,
        cluster: ecs.ICluster,
        service: ecs.IBaseService,
        container_insights: bool = True,
    ):
        self._namespace = namespace
        self._cluster = cluster
        self._service = service
        self.container_insights_on = container_insights

    def worker(
        self, name: str, *, statistic: str = "Sum", period: Duration = ONE_MINUTE
    ) -> cloudwatch.Metric:
        """A worker metric (``telemetry.WorkerMetric``), aggregated over every task."""
        return self._custom(name, telemetry.WORKER_SERVICE, statistic, period)

    def auditor(
        self, name: str, *, statistic: str = "Maximum", period: Duration = ONE_MINUTE
    ) -> cloudwatch.Metric:
        """An auditor metric (``telemetry.AuditorMetric``), published once a minute."""
        return self._custom(name, telemetry.AUDITOR_SERVICE, statistic, period)

    def reaper(
        self, name: str, *, statistic: str = "Sum", period: Duration = ONE_MINUTE
    ) -> cloudwatch.Metric:
        """A reaper metric (``telemetry.ReaperMetric``), published once per stopped task."""
        return self._custom(name, telemetry.REAPER_SERVICE, statistic, period)

    def running_tasks(
        self, *, statistic: str = "Average", period: Duration = ONE_MINUTE
    ) -> cloudwatch.Metric:
        """Running tasks of the worker service, from Container Insights (no L2 helper has it).
        Without Container Insights, the auditor's ``LiveWorkers``: the workers whose session is
        live, i.e. the running tasks that can hold streams (a task counts from its first
        session write, seconds after it runs, until its session lapses or it stops)."""
        if not self.container_insights_on:
            return self.auditor(
                telemetry.AuditorMetric.LIVE_WORKERS, statistic=statistic, period=period
            ).with_(label="live workers")
        return self.container_insights(
            "RunningTaskCount", statistic=statistic, period=period
        ).with_(label="running tasks")

    def container_insights(
        self, name: str, *, statistic: str = "Average", period: Duration = ONE_MINUTE
    ) -> cloudwatch.Metric:
        """A Container Insights metric of the worker service."""
        return self._of_service(CONTAINER_INSIGHTS_NAMESPACE, name, statistic, period)

    def service(
        self, name: str, *, statistic: str = "Average", period: Duration = ONE_MINUTE
    ) -> cloudwatch.Metric:
        """An ``AWS/ECS`` metric of the worker service (``CPUUtilization``,
        ``MemoryUtilization``: percent of what the tasks reserved)."""
        return self._of_service(ECS_NAMESPACE, name, statistic, period)

    def _of_service(
        self, namespace: str, name: str, statistic: str, period: Duration
    ) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=namespace,
            metric_name=name,
            dimensions_map={
                "ClusterName": self._cluster.cluster_name,
                "ServiceName": self._service.service_name,
            },
            statistic=statistic,
            period=period,
        )

    def _custom(
        self, name: str, service: str, statistic: str, period: Duration
    ) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=self._namespace,
            metric_name=name,
            dimensions_map={telemetry.SERVICE_DIMENSION: service},
            statistic=statistic,
            period=period,
        )
