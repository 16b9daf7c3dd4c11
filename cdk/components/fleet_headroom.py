"""An alarm when the worker fleet cannot take one more task's worth of streams."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

EVALUATION_MINUTES = 10
"""How long the fleet must stay short of headroom: scale-out takes a few minutes by itself."""


class FleetHeadroomAlarm(Construct):
    """Fires when the fleet runs ``max_tasks`` tasks, or when its spare capacity (running tasks ×
    ``capacity_per_task`` − wanted streams) is below one task's: a lost task's streams would then
    have nowhere to go, or the next stream started would find no room once scaling stops.
    Notifies ``topic`` when it fires and when it clears.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        wanted_streams: cloudwatch.IMetric,
        running_tasks: cloudwatch.IMetric,
        max_tasks: int,
        capacity_per_task: int,
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        short = cloudwatch.MathExpression(
            expression=f"IF(tasks >= {max_tasks} OR (tasks * {capacity_per_task} - wanted)"
            f" < {capacity_per_task}, 1, 0)",
            using_metrics={"tasks": running_tasks, "wanted": wanted_streams},
            label="at max tasks or under one task of spare capacity",
            period=Duration.minutes(1),
        )
        self.alarm = short.create_alarm(
            self,
            "Alarm",
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=EVALUATION_MINUTES,
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
            alarm_description=(
                f"The worker fleet has run at its maximum of {max_tasks} tasks, or with less than"
                f" one task ({capacity_per_task} streams) of spare capacity, for"
                f" {EVALUATION_MINUTES} minutes: losing a task would leave streams unowned."
                " Raise streamlease:maxTasks (and expectedStreams) or capacityPerWorker."
            ),
        )
        action = cw_actions.SnsAction(topic)
        self.alarm.add_alarm_action(action)
        self.alarm.add_ok_action(action)
