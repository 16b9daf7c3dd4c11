"""The optional consumer (``streamlease:consumer``): a Lambda function reading the sink stream.

Its event source mapping keeps each shard's order and never blocks a shard on one bad record:

- ``parallelization_factor=1``: one batch per shard at a time, so a stream id's messages (one
  partition key, one shard) are handed on in order and the watermark item of a shard has one
  writer;
- ``report_batch_item_failures``: the handler names a record it cannot read (corrupt, not
  ours) or whose message the user's function refused; Lambda retries from it;
- ``bisect_batch_on_error``: a batch that fails whole is split, so the bad record is isolated;
- ``retry_attempts`` bounded (:data:`RETRY_ATTEMPTS`), then the batch's description (shard,
  sequence numbers; no data) goes to the on-failure SQS queue and the shard moves on; an alarm
  watches that queue and the iterator age;
- a batching window (``consumer_batching_window_seconds``): the state's cost is one watermark
  read and write per invocation, so the window bounds it.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.command_queue import dead_letter_queue
from cdk.components.service_function import ServiceFunction
from cdk.components.table_grants import CONSUMER_WATERMARKS, grant_table
from streamlease import telemetry

HANDLER = "lambdas.consumer.handler"
BATCH_SIZE = 1_000
RETRY_ATTEMPTS = 3
"""Retries of a failing batch (halved each time by bisection) before it goes to the queue."""
MAX_RECORD_AGE = Duration.hours(24)
"""As long as the sink keeps records: a record is never skipped for its age alone."""


class StreamConsumer(Construct):
    """The consumer function, its event source mapping on ``sink_stream`` and its on-failure
    queue. ``environment`` must name the watermark table (``watermark_table_name``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        sink_stream: kinesis.IStream,
        watermarks: dynamodb.ITableV2,
        environment: Mapping[str, str],
        metrics_namespace: str,
        log_retention: logs.RetentionDays,
        batching_window_seconds: int,
    ) -> None:
        super().__init__(scope, construct_id)
        service = ServiceFunction(
            self,
            "Function",
            code=code,
            handler=HANDLER,
            service_name=telemetry.CONSUMER_SERVICE,
            metrics_namespace=metrics_namespace,
            environment=environment,
            description="streamlease consumer: the sink's messages, fenced by lease epoch",
            log_retention=log_retention,
            timeout=Duration.seconds(60),
        )
        self.function = service.function
        # Stateless like the reaper's dead letters: what it holds points into the sink stream,
        # which keeps records 24 hours; a queue of 14 days outlives every pointer in it.
        self.failures: sqs.Queue = dead_letter_queue(
            self, "FailedBatches", removal_policy=RemovalPolicy.DESTROY
        )
        Validations.of(self.failures).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SQS3",
                reason="This queue is itself the on-failure destination of the consumer's "
                "event source; an operator reads its messages, nothing consumes them.",
            )
        )
        """Descriptions of batches given up on: shard, first and last sequence numbers."""
        self.function.add_event_source(
            sources.KinesisEventSource(
                sink_stream,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=BATCH_SIZE,
                max_batching_window=Duration.seconds(batching_window_seconds),
                parallelization_factor=1,
                bisect_batch_on_error=True,
                report_batch_item_failures=True,
                retry_attempts=RETRY_ATTEMPTS,
                max_record_age=MAX_RECORD_AGE,
                on_failure=sources.SqsDlq(self.failures),
            )
        )
        # The event source grants the stream's reads and the queue's sends; the table here.
        grant_table(watermarks, service.role, CONSUMER_WATERMARKS)
