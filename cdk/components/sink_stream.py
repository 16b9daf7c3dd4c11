"""The sink: the Kinesis data stream every worker writes delivered messages to."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kinesis as kinesis
from constructs import Construct


class SinkStream(Construct):
    """An on-demand Kinesis data stream encrypted with the ``aws/kinesis`` key.

    Records are partitioned by stream id and carry the lease epoch, so consumers can drop records
    of an older epoch. Retained with its stack: it may hold data no consumer has read yet.
    """

    def __init__(self, scope: Construct, construct_id: str, *, retention_hours: int = 24) -> None:
        super().__init__(scope, construct_id)
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_mode=kinesis.StreamMode.ON_DEMAND,
            encryption=kinesis.StreamEncryption.MANAGED,
            retention_period=Duration.hours(retention_hours),
            removal_policy=RemovalPolicy.RETAIN,
        )
