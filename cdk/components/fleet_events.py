"""Events that drive the control-plane Lambdas: dead tasks to the reaper, a clock to the auditor."""

from __future__ import annotations

import jsii
from aws_cdk import Acknowledgment, CfnResource, Duration, RemovalPolicy, Validations
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.command_queue import dead_letter_queue

AUDIT_INTERVAL = Duration.minutes(1)
REAPER_EVENT_MAX_AGE = Duration.minutes(5)
"""How long a task-stopped event is worth retrying: past it, reconciliation has taken over."""
REAPER_RETRIES = 2
"""Retries by Lambda of a failed reaper run (and by EventBridge of a failed delivery)."""


class FleetEvents(Construct):
    """Two EventBridge rules.

    * An ECS task of ``cluster`` reached ``STOPPED`` → ``reaper``, which releases that task's
      leases at once instead of letting them lapse (crash fast path). Retried for a few minutes:
      a late release is still faster than a lease expiry plus reconciliation. An event that
      cannot be delivered (EventBridge's dead-letter queue) or whose run keeps failing (the
      function's on-failure destination) lands in ``reaper_dead_letters``, which is alarmed:
      no stopped task goes unnoticed.
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
        self.reaper_dead_letters = dead_letter_queue(
            self, "ReaperDeadLetters", removal_policy=RemovalPolicy.DESTROY
        )
        Validations.of(self.reaper_dead_letters).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SQS3",
                reason="This queue is itself the dead-letter queue of the reaper's events and "
                "runs; an operator reads its messages, nothing consumes them.",
            )
        )
        reaper.configure_async_invoke(
            max_event_age=REAPER_EVENT_MAX_AGE,
            retry_attempts=REAPER_RETRIES,
            on_failure=_QueueDestination(self.reaper_dead_letters),
        )
        function = reaper.node.default_child
        assert isinstance(function, CfnResource)
        function.add_metadata(
            "checkov",
            {
                "skip": [
                    {
                        "id": "CKV_AWS_116",
                        "comment": "Failed runs go to an on-failure destination (the "
                        "EventInvokeConfig), which Lambda recommends over a dead-letter queue "
                        "and which records the error too; this check reads DeadLetterConfig only.",
                    }
                ]
            },
        )
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
                targets.LambdaFunction(
                    reaper,
                    retry_attempts=REAPER_RETRIES,
                    max_event_age=REAPER_EVENT_MAX_AGE,
                    dead_letter_queue=self.reaper_dead_letters,
                )
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


@jsii.implements(lambda_.IDestination)
class _QueueDestination:
    """An SQS on-failure destination whose function may only send to it (CDK's own destination
    also grants the queue's attribute and URL reads, which Lambda does not need)."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self._queue = queue

    def bind(
        self,
        scope: Construct,
        fn: lambda_.IFunction,
        *,
        type: lambda_.DestinationType | None = None,
    ) -> lambda_.DestinationConfig:
        """Grant ``fn`` ``sqs:SendMessage`` on the queue and name it as the destination."""
        self._queue.grant(fn, "sqs:SendMessage")
        return lambda_.DestinationConfig(destination=self._queue.queue_arn)
