"""The AWS resources of one streamlease deployment, created on a local endpoint (moto).

The table comes from :func:`streamlease.indexes.create_table_kwargs`, the same definitions the CDK
app builds its table from; the queue pair and the sink stream mirror the CDK constructs' settings.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

from local.polling import wait_until
from streamlease import aws
from streamlease.commands import COMMAND_MAX_RECEIVES
from streamlease.indexes import create_table_kwargs
from streamlease.settings import Settings

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_kinesis import KinesisClient
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.literals import QueueAttributeNameType

"""A command received this often without being deleted moves to the DLQ (as in the CDK app)."""
DEAD_LETTER_RETENTION_SECONDS: Final = 14 * 24 * 3600
COMMAND_RETENTION_SECONDS: Final = 24 * 3600
SINK_SHARDS: Final = 1
_ACTIVE_WAIT_SECONDS: Final = 30.0


@dataclasses.dataclass(frozen=True)
class ResourceNames:
    """Physical names derived from a prefix (locally names are chosen, not generated)."""

    table: str
    queue: str
    dead_letter_queue: str
    kinesis_stream: str

    @classmethod
    def for_prefix(cls, prefix: str) -> ResourceNames:
        """Names for ``prefix`` (letters, digits, ``-`` and ``_``; at most 80 characters)."""
        if not prefix or len(prefix) > 80 or not all(c.isalnum() or c in "-_" for c in prefix):
            raise ValueError(f"resource prefix must be 1-80 of [A-Za-z0-9_-], got {prefix!r}")
        return cls(
            table=f"{prefix}-leases",
            queue=f"{prefix}-commands",
            dead_letter_queue=f"{prefix}-commands-dlq",
            kinesis_stream=f"{prefix}-records",
        )


def create_resources(settings: Settings, *, prefix: str) -> Settings:
    """Create (or reuse) the table, the command queue with its DLQ and the sink stream.

    Talks to ``settings.aws_endpoint_url`` in ``settings.aws_region``. Idempotent: resources
    that exist already are reused (the queue's attributes are brought up to date). Returns
    ``settings`` with ``table_name``, ``queue_url`` and ``kinesis_stream_name`` filled in.
    Raises ``botocore`` errors when the endpoint refuses.
    """
    names = ResourceNames.for_prefix(prefix)
    clients = _clients(settings)
    _create_table(clients.dynamodb, names.table)
    queue_url = _create_queues(clients.sqs, names, settings)
    _create_stream(clients.kinesis, names.kinesis_stream)
    return dataclasses.replace(
        settings,
        table_name=names.table,
        queue_url=queue_url,
        kinesis_stream_name=names.kinesis_stream,
    )


@dataclasses.dataclass(frozen=True)
class _Clients:
    dynamodb: DynamoDBClient
    sqs: SQSClient
    kinesis: KinesisClient


@functools.lru_cache(maxsize=32)
def _clients(settings: Settings) -> _Clients:
    # Building a client costs ~0.1 s; tests create resources hundreds of times per run.
    return _Clients(
        dynamodb=aws.client("dynamodb", settings),
        sqs=aws.client("sqs", settings),
        kinesis=aws.client("kinesis", settings),
    )


def _create_table(dynamodb: DynamoDBClient, table_name: str) -> None:
    try:
        dynamodb.create_table(**create_table_kwargs(table_name))
    except ClientError as exc:
        if _code(exc) != "ResourceInUseException":
            raise
    wait_until(
        lambda: dynamodb.describe_table(TableName=table_name)["Table"]["TableStatus"] == "ACTIVE",
        _ACTIVE_WAIT_SECONDS,
        f"table {table_name} active",
    )


def _create_queues(sqs: SQSClient, names: ResourceNames, settings: Settings) -> str:
    dlq_url = _ensure_queue(
        sqs, names.dead_letter_queue, {"MessageRetentionPeriod": str(DEAD_LETTER_RETENTION_SECONDS)}
    )
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    # SQS takes whole seconds; round a fractional test setting up, never below 1 s.
    visibility = max(1, math.ceil(settings.visibility_timeout_seconds))
    return _ensure_queue(
        sqs,
        names.queue,
        {
            "VisibilityTimeout": str(visibility),
            "MessageRetentionPeriod": str(COMMAND_RETENTION_SECONDS),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": COMMAND_MAX_RECEIVES}
            ),
        },
    )


def _ensure_queue(
    sqs: SQSClient, name: str, attributes: Mapping[QueueAttributeNameType, str]
) -> str:
    """The URL of queue ``name`` with ``attributes`` set, creating the queue if needed."""
    try:
        url = str(sqs.get_queue_url(QueueName=name)["QueueUrl"])
    except ClientError as exc:
        if _code(exc) not in {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}:
            raise
        return str(sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])
    sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    return url


def _create_stream(kinesis: KinesisClient, stream_name: str) -> None:
    try:
        kinesis.create_stream(StreamName=stream_name, ShardCount=SINK_SHARDS)
    except ClientError as exc:
        if _code(exc) != "ResourceInUseException":
            raise
    wait_until(
        lambda: (
            kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"][
                "StreamStatus"
            ]
            == "ACTIVE"
        ),
        _ACTIVE_WAIT_SECONDS,
        f"stream {stream_name} active",
    )


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
