"""The consumer's watermark table: one item per consumer and Kinesis shard
(``streamlease.schema``'s watermark key), written once per shard batch."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from streamlease.schema import WATERMARK_KEY_TYPE, WATERMARK_PK

_ATTRIBUTE_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}


class WatermarkTable(Construct):
    """On demand (its writes follow the sink's batches), point-in-time recovery and deletion
    protection on, encrypted with the AWS owned key as the lease table is, retained with its
    stack: losing it makes the consumer hand on again every message the sink still keeps."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.TableV2(
            self,
            "Table",
            partition_key=dynamodb.Attribute(
                name=WATERMARK_PK, type=_ATTRIBUTE_TYPES[WATERMARK_KEY_TYPE]
            ),
            billing=dynamodb.Billing.on_demand(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
