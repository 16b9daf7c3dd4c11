"""The consumer's state cost (part of the cost section): what ``streamlease.consumer``'s
DynamoDB watermarks cost per message and a month per 1,000 streams.

Measured, not assumed: 1,000 streams' messages are packed into KPL aggregated records with the
sink's own encoders, spread over the shards the cost section sizes for each rate (by each
stream's hash key, as Kinesis does), and read by a ``Consumer`` on ``DynamoWatermarks`` on the
local moto server; each shard's item is read back as stored and sized by DynamoDB's billing rule
(:func:`bench.write_units.item_size_bytes`). Each stream has its own seq, up to a month into a
feed at that rate (streams started at different times), and its own epoch (1 to 50 takeovers),
so their varints are as long, and as unlike, as in steady state. Two shapes of stream id: the
cost section's (``c10-00042``: a deployment's ids share prefixes and characters, which the
encoding front-codes and compresses) and random UUIDs (nothing shared).
:func:`bench.cost_model.consumer_state` prices it per batching window.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Final

from bench import cost_model
from bench import prices as p
from bench.common import Table
from bench.context import BenchContext
from bench.write_units import item_size_bytes
from streamlease import aws
from streamlease.consumer import Consumer, DynamoWatermarks, SourceRecord, create_watermark_table
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import Aggregator, hash_key
from streamlease.schema import WATERMARK_PK, watermark_key
from streamlease.settings import Settings

WINDOWS: Final = (1.0, 5.0, 10.0)
"""Batching windows priced: 1 s is the Lambda event source mapping's default (no
``MaximumBatchingWindowInSeconds``: each shard is polled about once a second)."""
WINDOW: Final = 5.0
"""The window the goal is judged at: ``MaximumBatchingWindowInSeconds = 5`` on the event
source mapping (or a KCL-style reader committing every 5 s)."""
GOAL_DOLLARS: Final = 5.0
"""$ a month per 1,000 streams at 10 msg/s."""
LAMBDA_PAYLOAD_BYTES: Final = 6 * 1024 * 1024
"""A Lambda invocation's payload limit: a batch's records, base64 (4/3 of their bytes)."""
ID_SHAPES: Final[dict[str, Callable[[float, int], str]]] = {
    "c10-00042": lambda rate, i: f"c{rate:g}-{i:05d}",
    "uuid4": lambda rate, i: str(uuid.UUID(int=hash_key(f"{rate}-{i}"), version=4)),
}


def item_sizes(ctx: BenchContext, ids: list[str], rate: float, shards: int) -> list[int]:
    """Bytes of each shard's watermark item after a consumer read one second of ``ids``'
    messages at ``rate`` (at least one each) and committed, as DynamoDB bills them."""
    settings = Settings(aws_endpoint_url=ctx.moto.endpoint_url, aws_region="us-east-1")
    client = aws.client("dynamodb", settings)
    table = f"bench-watermarks-{uuid.uuid4().hex[:8]}"
    create_watermark_table(client, table)
    store = DynamoWatermarks(client, table, "bench")
    consumer = Consumer(store)
    base_seq = int(rate * cost_model.SECONDS_PER_MONTH)
    per_shard: dict[int, list[str]] = {}
    for stream_id in ids:
        per_shard.setdefault(hash_key(stream_id) * shards >> 128, []).append(stream_id)
    sizes = []
    for shard, streams in sorted(per_shard.items()):
        shard_id = f"shardId-{shard:012d}"
        for second in range(2):  # the first commit creates the item, the second rewrites it
            records = _records(shard_id, streams, base_seq, second * 10, max(1, int(rate)))
            consumer.commit(consumer.process(shard_id, records))
        key = {WATERMARK_PK: {"S": watermark_key("bench", shard_id)}}
        item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
        sizes.append(item_size_bytes(item))
    return sizes


def _records(
    shard_id: str, streams: list[str], base_seq: int, offset: int, per_stream: int
) -> list[SourceRecord]:
    """``per_stream`` messages of each stream, packed as the sink packs a shard's messages:
    each stream at its own epoch and seq (drawn from its id: the same in every call) plus
    ``offset``."""
    records, aggregator = [], Aggregator("bench")
    for n in range(per_stream):
        for stream_id in streams:
            drawn = hash_key(stream_id)
            epoch, seq = 1 + drawn % 50, base_seq // 2 + (drawn >> 64) % (base_seq // 2)
            data = encode_message(epoch_prefix(epoch), seq + offset + n, 0, b"{}", "json")
            if aggregator.size_with(stream_id, len(data)) > 50_000:
                records.append(aggregator.encode())
                aggregator = Aggregator("bench")
            aggregator.add(stream_id, data)
    records.append(aggregator.encode())
    return [SourceRecord(shard_id, str(i), "agg", data) for i, data in enumerate(records, 1)]


def table(
    ctx: BenchContext,
    shards: Mapping[float, int],
    bytes_per_message: Mapping[float, float],
    streams: int = cost_model.STREAMS,
) -> Table:
    """The consumer's state cost at each rate (with its shard count), id shape and window;
    ``bytes_per_message``: the sink's measured Kinesis bytes per message at each rate."""
    result = Table(
        f"Consumer state: DynamoDB watermarks of {streams:,} streams"
        f" (streamlease.consumer, {p.REGION} on-demand prices)",
        [
            "rate",
            "stream ids",
            "shards",
            "item bytes per shard",
            *(f"write / read units per message, $ a month @ {w:g} s window" for w in WINDOWS),
        ],
    )
    judged: dict[str, float] = {}
    for rate in sorted(shards):
        for shape, make in ID_SHAPES.items():
            ctx.progress.update(f"consumer state: {rate:g} msg/s, {shape} ids", force=True)
            sizes = item_sizes(ctx, [make(rate, i) for i in range(streams)], rate, shards[rate])
            cells = []
            for window in WINDOWS:
                cost = cost_model.consumer_state(sizes, rate, window, streams)
                cells.append(
                    f"{cost.write_units_per_message:.2g} / {cost.read_units_per_message:.2g},"
                    f" ${cost.dollars:,.2f}"
                )
                if rate == 10.0 and window == WINDOW:
                    judged[shape] = cost.dollars
            result.add(
                f"{rate:g} msg/s",
                shape,
                shards[rate],
                f"{min(sizes):,}–{max(sizes):,}",
                *cells,
            )
    for shape, dollars in judged.items():
        verdict = "met" if dollars <= GOAL_DOLLARS else "not met"
        result.notes.append(
            f"Goal, 10 msg/s, {shape} ids, {WINDOW:g} s window: ≤ ${GOAL_DOLLARS:g} a month per"
            f" 1,000 streams: ${dollars:,.2f} ({verdict})."
        )
    for rate, size in sorted(bytes_per_message.items()):
        per_shard = streams * rate * size / shards[rate]
        longest = LAMBDA_PAYLOAD_BYTES / (per_shard * 4 / 3)
        result.notes.append(
            f"At {rate:g} msg/s a Lambda batch reaches the 6 MB payload limit after"
            f" {longest:,.1f} s of a shard's records ({per_shard / 1024:,.0f} KiB/s a shard,"
            " base64): a longer window is cut there."
        )
    result.notes += [
        "One commit per shard per batch: a conditional PutItem of the shard's whole item (the"
        " version, the Kinesis sequence number and every stream's epoch and last seq, binary,"
        " ids sorted and front-coded, zlib-compressed when smaller), 1 write unit per started"
        " KB; a batch that moved nothing writes nothing. One strongly consistent read of the"
        " item per batch (a Lambda handler re-opens its shard each invocation), 1 read unit per"
        " started 4 KB. The cost grows"
        " with batches and the number of streams, not with messages: at a given window 1 and"
        " 10 msg/s cost about the same a month, once each batch touches every stream.",
        "Seqs are up to a month into each feed (varints of 3–4 bytes); feeds numbered by"
        " millisecond timestamps have 6-byte seqs, about 2 bytes a stream more.",
    ]
    return result
