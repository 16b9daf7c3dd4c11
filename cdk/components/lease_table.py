"""The lease table: stream and worker items, keyed and indexed as ``streamlease.schema`` says."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from cdk.config import BillingMode, CapacityRange, TableIndexes
from streamlease.indexes import INDEXES, KEY_ATTRIBUTE_TYPES, MIGRATION_STAGES, IndexSpec
from streamlease.schema import PK

_ATTRIBUTE_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}
_TARGET_UTILIZATION_PERCENT = 70


def _attribute(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=_ATTRIBUTE_TYPES[KEY_ATTRIBUTE_TYPES[name]])


def _autoscaled(capacity: CapacityRange) -> dynamodb.Capacity:
    return dynamodb.Capacity.autoscaled(
        min_capacity=capacity.minimum,
        max_capacity=capacity.maximum,
        target_utilization_percent=_TARGET_UTILIZATION_PERCENT,
    )


class LeaseTable(Construct):
    """The DynamoDB table holding stream and worker items and the schema's indexes.

    Point-in-time recovery and deletion protection are on and the table is retained when its
    stack is deleted: it is the only record of which streams are wanted and how far they got.
    ``indexes``: the schema's, or those of a table midway through a migration.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        billing: BillingMode,
        provisioned_read: CapacityRange,
        provisioned_write: CapacityRange,
        indexes: TableIndexes = TableIndexes.CURRENT,
        warm_write_units: int = 0,
    ) -> None:
        """``warm_write_units``: pre-warm the table and every index to take this many write
        units a second at once (0: DynamoDB's default warm throughput, no pre-warming)."""
        super().__init__(scope, construct_id)
        stage = indexes.stage
        specs = INDEXES if stage is None else MIGRATION_STAGES[stage]
        if billing is BillingMode.ON_DEMAND:
            table_billing = dynamodb.Billing.on_demand()
        else:
            table_billing = dynamodb.Billing.provisioned(
                read_capacity=_autoscaled(provisioned_read),
                write_capacity=_autoscaled(provisioned_write),
            )
        warm = (
            dynamodb.WarmThroughput(write_units_per_second=warm_write_units)
            if warm_write_units
            else None
        )
        self.table = dynamodb.TableV2(
            self,
            "Table",
            partition_key=_attribute(PK),
            billing=table_billing,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
            warm_throughput=warm,
            global_secondary_indexes=[
                dynamodb.GlobalSecondaryIndexPropsV2(
                    index_name=index.name,
                    partition_key=_attribute(index.partition_key),
                    sort_key=_attribute(index.sort_key) if index.sort_key else None,
                    projection_type=_projection(index),
                    non_key_attributes=list(index.projected) if index.projected else None,
                    warm_throughput=warm,
                )
                for index in specs
            ],
        )


def _projection(index: IndexSpec) -> dynamodb.ProjectionType:
    """The projection ``index`` asks for, as ``indexes.create_table_kwargs`` builds it locally."""
    if index.projected:
        return dynamodb.ProjectionType.INCLUDE
    return dynamodb.ProjectionType.KEYS_ONLY
