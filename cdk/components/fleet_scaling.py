"""Scaling of the worker service on load per task (CPU), with wanted streams per task as a cap."""

from __future__ import annotations

from aws_cdk import Duration, Names
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from constructs import Construct

SCALE_OUT_COOLDOWN_SECONDS = 60
SCALE_IN_COOLDOWN_SECONDS = 300
"""Slow scale-in: every removed task hands its streams over, which costs reconnects."""


def _metric_stat(
    metric: cloudwatch.Metric,
) -> appscaling.CfnScalingPolicy.TargetTrackingMetricStatProperty:
    return appscaling.CfnScalingPolicy.TargetTrackingMetricStatProperty(
        metric=appscaling.CfnScalingPolicy.TargetTrackingMetricProperty(
            namespace=metric.namespace,
            metric_name=metric.metric_name,
            dimensions=[
                appscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(
                    name=name, value=value
                )
                for name, value in (metric.dimensions or {}).items()
            ],
        ),
        stat=metric.statistic,
    )


class FleetScaling(Construct):
    """Two target-tracking policies on the service's task count: the tasks' average CPU
    utilization at ``target_cpu_percent`` (the load: streams cost what their messages cost),
    and ``wanted_streams / running_tasks`` at ``target_streams_per_task`` (the cap: however
    light the streams, a task holds no more than its share of its capacity).

    Application Auto Scaling scales out when either policy asks and in only when both allow,
    so a few heavy streams add tasks by CPU although their count is low, and many light ones
    add tasks by count although the CPU is idle. Wanted streams come from the auditor, so that
    cap is visible even when no worker runs and counts streams nobody owns yet. The L2
    ``scale_to_track_custom_metric`` refuses metric math, hence the L1 policy for it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        service: ecs.FargateService,
        min_tasks: int,
        max_tasks: int,
        wanted_streams: cloudwatch.Metric,
        running_tasks: cloudwatch.Metric,
        target_streams_per_task: float,
        target_cpu_percent: float,
    ) -> None:
        super().__init__(scope, construct_id)
        self.task_count = service.auto_scale_task_count(
            min_capacity=min_tasks, max_capacity=max_tasks
        )
        self.task_count.scale_on_cpu_utilization(
            "CpuPerTask",
            target_utilization_percent=target_cpu_percent,
            scale_out_cooldown=Duration.seconds(SCALE_OUT_COOLDOWN_SECONDS),
            scale_in_cooldown=Duration.seconds(SCALE_IN_COOLDOWN_SECONDS),
        )
        query = appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty
        self.policy = appscaling.CfnScalingPolicy(
            self,
            "StreamsPerTask",
            policy_name=Names.unique_id(self),
            policy_type="TargetTrackingScaling",
            scaling_target_id=self.task_count,
            target_tracking_scaling_policy_configuration=appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=target_streams_per_task,
                scale_out_cooldown=SCALE_OUT_COOLDOWN_SECONDS,
                scale_in_cooldown=SCALE_IN_COOLDOWN_SECONDS,
                customized_metric_specification=appscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(
                    metrics=[
                        query(
                            id="wanted", metric_stat=_metric_stat(wanted_streams), return_data=False
                        ),
                        query(
                            id="tasks", metric_stat=_metric_stat(running_tasks), return_data=False
                        ),
                        query(
                            id="load",
                            expression="wanted / tasks",
                            label="wanted streams per running task",
                            return_data=True,
                        ),
                    ]
                ),
            ),
        )
