"""The command queue: start and handoff hints for the workers, with a dead-letter queue."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct

# Commands are hints that reconciliation also covers, so a day of backlog is plenty; dead letters
# are kept as long as SQS allows so an operator can read what was poisonous.
_COMMAND_RETENTION = Duration.days(1)
_DEAD_LETTER_RETENTION = Duration.days(14)


def dead_letter_queue(
    scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy
) -> sqs.Queue:
    """An encrypted, TLS-only queue that keeps what lands in it as long as SQS allows, for an
    operator to read."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=_DEAD_LETTER_RETENTION,
        removal_policy=removal_policy,
    )


class CommandQueue(Construct):
    """An encrypted, TLS-only SQS queue whose poison messages move to a dead-letter queue."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        visibility_timeout_seconds: int,
        max_receives: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = dead_letter_queue(
            self, "DeadLetterQueue", removal_policy=RemovalPolicy.RETAIN
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=_COMMAND_RETENTION,
            visibility_timeout=Duration.seconds(visibility_timeout_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=max_receives
            ),
            removal_policy=RemovalPolicy.RETAIN,
        )
