"""Events that drive the control-plane Lambdas: dead tasks to the reaper, a clock to the auditor."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

AUDIT_INTERVAL = Duration.minutes(1)


class FleetEvents(Construct):
    """Two EventBridge rules.

    * An ECS task of ``cluster`` reached ``STOPPED`` → ``reaper``, which releases that task's
      leases at once instead of letting them lapse (crash fast path). Retried for a few minutes:
      a late release is still faster than a lease expiry plus reconciliation.
    * Every minute → ``auditor``, which publishes wanted, owned and orphaned stream counts. A
      missed run is not retried: the next one is a minute away.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        reaper: lambda_.IFunction,
        auditor: lambda_.IFunction,
    ) -> None:
        super().__init__(scope, construct_id)
        self.task_stopped = events.Rule(
            self,
            "TaskStopped",
            description="streamlease: a worker task stopped; release its leases",
            event_pattern=events.EventPattern(
                source=["aws.ecs"],
                detail_type=["ECS Task State Change"],
                detail={"clusterArn": [cluster.cluster_arn], "lastStatus": ["STOPPED"]},
            ),
            targets=[
                targets.LambdaFunction(reaper, retry_attempts=3, max_event_age=Duration.minutes(5))
            ],
        )
        self.audit_schedule = events.Rule(
            self,
            "AuditSchedule",
            description="streamlease: publish wanted, owned and orphaned stream counts",
            schedule=events.Schedule.rate(AUDIT_INTERVAL),
            targets=[
                targets.LambdaFunction(auditor, retry_attempts=0, max_event_age=Duration.minutes(1))
            ],
        )
