"""A consumer process of the watermark race (tests/moto/test_consumer_state.py): started with
multiprocessing's spawn, so it imports this module afresh, as a separate consumer would."""

from __future__ import annotations

import multiprocessing.synchronize
from typing import Any

from streamlease import aws
from streamlease.consumer import Consumer, DynamoWatermarks, SourceRecord, WatermarkConflict
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import Aggregator
from streamlease.settings import Settings

SHARD = "shardId-000000000000"


def record(name: str, seq: int) -> SourceRecord:
    aggregator = Aggregator(name)
    aggregator.add(name, encode_message(epoch_prefix(1), seq, 0, b"{}", "json"))
    return SourceRecord(SHARD, str(seq), name, aggregator.encode())


def race(
    endpoint_url: str,
    table: str,
    name: str,
    rounds: int,
    go: multiprocessing.synchronize.Barrier,
    results: Any,
) -> None:
    """Commit ``rounds`` batches to one shard, each moving this consumer's own stream: on a
    lost race re-open the shard and try again. Starts when every racer is ready (``go``, a
    barrier); puts (name, versions won, conflicts)."""
    client = aws.client("dynamodb", Settings(aws_endpoint_url=endpoint_url))
    store = DynamoWatermarks(client, table, "race")
    consumer = Consumer(store)
    won: list[int] = []
    conflicts = 0
    go.wait(60)
    seq = 0
    while len(won) < rounds:
        consumer.open_shard(SHARD)
        seq += 1
        batch = consumer.process(SHARD, [record(name, seq)])
        try:
            consumer.commit(batch)
        except WatermarkConflict:
            conflicts += 1
            continue
        assert store.last_item is not None
        won.append(int(store.last_item["v"]["N"]))
    results.put((name, won, conflicts))
