"""The consumer Lambda (``streamlease.consumer.lambda_handler``) on Lambda-shaped events: records
our encoder wrote (KPL aggregates of ``StreamMessage``), put on the moto server's Kinesis and read
back with their real sequence numbers; watermarks in a DynamoDB table on the same server.

A consumer hands each message on once, in order, newest epoch only; it reports a record it
cannot read (never drops it) and stops a shard at a message its function refused; its
watermarks are written once per batch, before the response is returned.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from local.lambda_context import LambdaContext
from streamlease import aws
from streamlease.consumer import ConsumedMessage, create_watermark_table
from streamlease.consumer.lambda_handler import make_handler
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import Aggregator
from streamlease.schema import WATERMARK_PK, WatermarkAttr, watermark_key
from streamlease.settings import Settings

RECEIVED_MS = 1_700_000_000_000


@pytest.fixture
def settings(aws_settings: Settings) -> Settings:
    """The test's stream, and a fresh watermark table, on the moto server."""
    table = f"wm-{uuid.uuid4().hex[:12]}"
    create_watermark_table(aws.client("dynamodb", aws_settings), table)
    return dataclasses.replace(aws_settings, watermark_table_name=table)


def aggregate(stream_id: str, epoch: int, seqs: list[int]) -> bytes:
    """One Kinesis record as the sink writes it: the messages of one batch, aggregated."""
    packed = Aggregator("w-1")
    for seq in seqs:
        payload = b'{"n":%d}' % seq
        packed.add(
            stream_id, encode_message(epoch_prefix(epoch), seq, RECEIVED_MS, payload, "json")
        )
    return packed.encode()


def lambda_event(settings: Settings, records: list[tuple[str, bytes]]) -> dict[str, Any]:
    """``records`` (partition key, data) put on the stream, read back and shaped as the event
    a Kinesis event source mapping sends."""
    kinesis = aws.client("kinesis", settings)
    name = settings.kinesis_stream_name
    for key, data in records:
        kinesis.put_record(StreamName=name, PartitionKey=key, Data=data)
    arn = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    (shard,) = kinesis.list_shards(StreamName=name)["Shards"]
    iterator = kinesis.get_shard_iterator(
        StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    read = kinesis.get_records(ShardIterator=iterator)["Records"]
    return {
        "Records": [
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": r["PartitionKey"],
                    "sequenceNumber": r["SequenceNumber"],
                    "data": base64.b64encode(r["Data"]).decode(),
                    "approximateArrivalTimestamp": r["ApproximateArrivalTimestamp"].timestamp(),
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": f"{shard['ShardId']}:{r['SequenceNumber']}",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/consumer",
                "awsRegion": settings.aws_region,
                "eventSourceARN": arn,
            }
            for r in read
        ]
    }


def sequence_numbers(event: dict[str, Any]) -> list[str]:
    return [r["kinesis"]["sequenceNumber"] for r in event["Records"]]


def stored_version(settings: Settings, event: dict[str, Any]) -> int | None:
    """The version of the shard's watermark item (None: never written)."""
    record = event["Records"][0]
    shard_id = record["eventID"].split(":")[0]
    space = "consumer/" + record["eventSourceARN"].rsplit("/", 1)[-1]
    item = aws.client("dynamodb", settings).get_item(
        TableName=settings.watermark_table_name,
        Key={WATERMARK_PK: {"S": watermark_key(space, shard_id)}},
        ConsistentRead=True,
    )
    found = item.get("Item")
    return int(found[WatermarkAttr.VERSION]["N"]) if found else None


class Collected:
    """An ``on_message`` that keeps (stream, epoch, seq) and can refuse chosen messages."""

    def __init__(self, refuse: Callable[[ConsumedMessage], bool] = lambda m: False) -> None:
        self.seen: list[tuple[str, int, int]] = []
        self.refuse = refuse

    def __call__(self, message: ConsumedMessage) -> None:
        if self.refuse(message):
            raise RuntimeError("downstream refused")
        self.seen.append((message.stream_id, message.epoch, message.seq))


def test_messages_are_handed_on_once_in_order_of_the_newest_epoch(settings: Settings) -> None:
    """A repeated range and an older epoch's late record are dropped; one watermark write;
    the same event again (a retry) hands on nothing."""
    event = lambda_event(
        settings,
        [
            ("a", aggregate("a", 2, [1, 2, 3])),
            ("a", aggregate("a", 2, [2, 3, 4])),
            ("a", aggregate("a", 3, [5])),
            ("a", aggregate("a", 2, [5, 6])),
        ],
    )
    collected = Collected()
    handler = make_handler(collected, settings=settings)
    assert handler(event, LambdaContext()) == {"batchItemFailures": []}
    assert collected.seen == [("a", 2, 1), ("a", 2, 2), ("a", 2, 3), ("a", 2, 4), ("a", 3, 5)]
    assert stored_version(settings, event) == 1
    assert handler(event, LambdaContext()) == {"batchItemFailures": []}
    assert len(collected.seen) == 5
    assert stored_version(settings, event) == 1  # nothing moved: nothing written


def test_a_record_that_is_not_ours_is_reported_and_the_rest_goes_on(settings: Settings) -> None:
    """The corrupt record is a batch item failure (Lambda retries from it, then sends it to the
    on-failure destination); the records after it are handed on and committed before the
    answer, so its retry repeats none of them."""
    good = aggregate("a", 1, [1, 2])
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])  # its MD5 no longer matches
    event = lambda_event(
        settings, [("a", good), ("a", corrupt), ("a", aggregate("a", 1, [3])), ("x", b"hello")]
    )
    numbers = sequence_numbers(event)
    collected = Collected()
    handler = make_handler(collected, settings=settings)
    answer = handler(event, LambdaContext())
    assert answer == {
        "batchItemFailures": [{"itemIdentifier": numbers[1]}, {"itemIdentifier": numbers[3]}]
    }
    assert collected.seen == [("a", 1, 1), ("a", 1, 2), ("a", 1, 3)]
    assert stored_version(settings, event) == 1
    retry = {"Records": event["Records"][1:]}
    assert handler(retry, LambdaContext())["batchItemFailures"][0] == {"itemIdentifier": numbers[1]}
    assert len(collected.seen) == 3


def test_a_refused_message_stops_its_shard_until_the_retry(settings: Settings) -> None:
    """``on_message`` raising at seq 3: that record and every later one are reported, the
    watermarks cover what was handed on, and the retry from it hands on the rest once."""
    event = lambda_event(
        settings,
        [
            ("a", aggregate("a", 1, [1, 2])),
            ("a", aggregate("a", 1, [3])),
            ("b", aggregate("b", 1, [1])),
        ],
    )
    numbers = sequence_numbers(event)
    refusing = Collected(refuse=lambda m: m.seq == 3)
    answer = make_handler(refusing, settings=settings)(event, LambdaContext())
    assert answer == {
        "batchItemFailures": [{"itemIdentifier": numbers[1]}, {"itemIdentifier": numbers[2]}]
    }
    assert refusing.seen == [("a", 1, 1), ("a", 1, 2)]
    assert stored_version(settings, event) == 1
    accepting = Collected()
    retry = {"Records": event["Records"][1:]}
    assert make_handler(accepting, settings=settings)(retry, LambdaContext()) == {
        "batchItemFailures": []
    }
    assert accepting.seen == [("a", 1, 3), ("b", 1, 1)]
    assert stored_version(settings, event) == 2


def test_the_default_handler_is_importable_from_the_asset_layout() -> None:
    """``lambdas.consumer.handler`` is what the CDK construct points the function at."""
    from cdk.components.stream_consumer import HANDLER
    from lambdas import consumer

    module, _, name = HANDLER.rpartition(".")
    assert module == consumer.__name__
    assert callable(getattr(consumer, name))
