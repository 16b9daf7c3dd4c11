"""The sink: the Kinesis data stream every worker writes delivered messages to."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kinesis as kinesis
from constructs import Construct

from cdk.config import SinkCapacity


class SinkStream(Construct):
    """A Kinesis data stream encrypted with the ``aws/kinesis`` key: on demand, or provisioned
    with ``shards`` shards (1 MB/s and 1,000 records/s of writes each).

    Messages are partitioned by stream id and carry the lease epoch, so consumers can drop those
    of an older epoch. Retained with its stack: it may hold data no consumer has read yet.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        capacity: SinkCapacity = SinkCapacity.ON_DEMAND,
        shards: int = 1,
        retention_hours: int = 24,
    ) -> None:
        super().__init__(scope, construct_id)
        provisioned = capacity is SinkCapacity.PROVISIONED
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_mode=kinesis.StreamMode.PROVISIONED
            if provisioned
            else kinesis.StreamMode.ON_DEMAND,
            shard_count=shards if provisioned else None,
            encryption=kinesis.StreamEncryption.MANAGED,
            retention_period=Duration.hours(retention_hours),
            removal_policy=RemovalPolicy.RETAIN,
        )
