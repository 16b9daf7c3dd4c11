"""The stateful stack: the lease table, the command queues, the sink stream and, with the
consumer on (``streamlease:consumer``), the consumer's watermark table."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnElement, CfnOutput, Stack
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from cdk.components.command_queue import CommandQueue
from cdk.components.lease_table import LeaseTable
from cdk.components.sink_stream import SinkStream
from cdk.components.watermark_table import WatermarkTable
from cdk.config import DeploymentConfig

PINNED_LOGICAL_IDS = {
    "LeaseTable": "AWS::DynamoDB::GlobalTable",
    "CommandQueue": "AWS::SQS::Queue",
    "CommandDeadLetterQueue": "AWS::SQS::Queue",
    "SinkStream": "AWS::Kinesis::Stream",
    "WatermarkTable": "AWS::DynamoDB::GlobalTable",
}
"""Logical id → resource type of every stateful resource. A changed logical id makes
CloudFormation create a new resource (and orphan the retained old one), so these never change."""


def _pin(element: Any, logical_id: str) -> None:
    assert isinstance(element, CfnElement)
    element.override_logical_id(logical_id)


class StatefulStack(Stack):
    """Everything whose loss loses data. Every resource here is retained on stack deletion."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: DeploymentConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        leases = LeaseTable(
            self,
            "Leases",
            billing=config.billing,
            provisioned_read=config.provisioned_read,
            provisioned_write=config.provisioned_write,
            indexes=config.table_indexes,
            warm_write_units=config.table_warm_write_units,
        )
        commands = CommandQueue(
            self,
            "Commands",
            visibility_timeout_seconds=config.command_visibility_timeout_seconds,
            max_receives=config.command_max_receives,
        )
        sink = SinkStream(self, "Sink", capacity=config.sink_capacity, shards=config.sink_shards)

        _pin(leases.table.node.default_child, "LeaseTable")
        _pin(commands.queue.node.default_child, "CommandQueue")
        _pin(commands.dead_letter_queue.node.default_child, "CommandDeadLetterQueue")
        _pin(sink.stream.node.default_child, "SinkStream")

        self.table = leases.table
        self.queue = commands.queue
        self.dead_letter_queue = commands.dead_letter_queue
        self.sink_stream = sink.stream
        self.watermarks: dynamodb.ITableV2 | None = None
        if config.consumer:
            watermarks = WatermarkTable(self, "Watermarks")
            _pin(watermarks.table.node.default_child, "WatermarkTable")
            self.watermarks = watermarks.table
            CfnOutput(self, "WatermarkTableName", value=watermarks.table.table_name)

        CfnOutput(self, "TableName", value=self.table.table_name)
        CfnOutput(self, "SinkStreamName", value=self.sink_stream.stream_name)
        CfnOutput(self, "CommandQueueUrl", value=self.queue.queue_url)
        CfnOutput(self, "DeadLetterQueueUrl", value=self.dead_letter_queue.queue_url)
