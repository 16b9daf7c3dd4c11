"""Kinesis records of the sink built with the worker's own encoders, for the consumer's tests.

``Message`` is one delivered message (stream, epoch, seq, payload and its encoding); ``shard``
numbers the records it packs with growing Kinesis sequence numbers, as one shard would.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import NamedTuple

from streamlease.consumer import SourceRecord
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import Aggregator
from streamlease.sink_fields import PayloadEncoding
from worker.sinks.base import BatchHeader, SinkRecord, encode_record
from worker.sinks.kinesis import partition_key

SHARD = "shardId-000000000000"
WORKER = "task-1/7-ab12"


class Message(NamedTuple):
    stream_id: str
    epoch: int
    seq: int
    payload: bytes = b'{"v":1}'
    encoding: str = PayloadEncoding.JSON
    received_at_ms: int = 1_700_000_000_000


def json_seq(stream_id: str, epoch: int, seq: int) -> Message:
    """A message of a feed with upstream seqs (its payload a JSON document naming its seq)."""
    return Message(stream_id, epoch, seq, b'{"seq":%d}' % seq)


def numbered(stream_id: str, epoch: int, seq: int, text: str = "") -> Message:
    """A message of a ``seq: none`` feed (text, numbered by the worker)."""
    return Message(stream_id, epoch, seq, (text or f"frame {seq}").encode(), PayloadEncoding.TEXT)


_numbers = itertools.count(49_600_000_000_000_000_000_000_000_000)


def next_sequence_number() -> str:
    """A Kinesis sequence number above every one given before."""
    return str(next(_numbers))


def aggregated(messages: Iterable[Message], shard_id: str = SHARD) -> SourceRecord:
    """One KPL aggregated record of ``messages``, as the Kinesis sink packs them."""
    aggregator = Aggregator(WORKER)
    for m in messages:
        data = encode_message(epoch_prefix(m.epoch), m.seq, m.received_at_ms, m.payload, m.encoding)
        aggregator.add(partition_key(m.stream_id), data)
    return SourceRecord(shard_id, next_sequence_number(), "agg", aggregator.encode())


def plain(m: Message, shard_id: str = SHARD) -> SourceRecord:
    """One JSON-line record of ``m``, as the sink writes with aggregation off."""
    line = encode_record(
        BatchHeader(m.stream_id, m.epoch, WORKER),
        SinkRecord(m.seq, m.received_at_ms, m.payload, m.encoding),
    )
    return SourceRecord(shard_id, next_sequence_number(), partition_key(m.stream_id), line)


def one_each(messages: Iterable[Message], shard_id: str = SHARD) -> list[SourceRecord]:
    """Each message in an aggregated record of its own (the order of a shard)."""
    return [aggregated([m], shard_id) for m in messages]


def seqs(batch_messages: Iterable[object]) -> list[tuple[str, int, int]]:
    """(stream, epoch, seq) of emitted messages."""
    return [(m.stream_id, m.epoch, m.seq) for m in batch_messages]  # type: ignore[attr-defined]
