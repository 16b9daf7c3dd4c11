"""What the consumer reads: records from GetRecords and Lambda events, aggregated by our sink or
by AWS's own aggregator, plain JSON lines — and every kind of bad input, which is reported
with its shard and sequence number, never crashes the reader and never quotes the data."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from consumer_support import (
    SHARD,
    WORKER,
    Message,
    aggregated,
    json_seq,
    next_sequence_number,
    plain,
)

from streamlease.consumer import Consumer, MemoryWatermarks, ProblemKind, SourceRecord
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import MAGIC, Aggregator, varint

SECRET = b"do-not-echo-this-body"


def read(*records: SourceRecord) -> Consumer:
    consumer = Consumer(MemoryWatermarks())
    consumer.process(SHARD, list(records))
    return consumer


def record(data: bytes, key: str = "s") -> SourceRecord:
    return SourceRecord(SHARD, next_sequence_number(), key, data)


def test_a_get_records_entry_becomes_a_source_record() -> None:
    arrival = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    entry = {
        "SequenceNumber": "4960",
        "PartitionKey": "s",
        "Data": b"x",
        "ApproximateArrivalTimestamp": arrival,
    }
    assert SourceRecord.from_get_records("shardId-000000000002", entry) == (
        "shardId-000000000002",
        "4960",
        "s",
        b"x",
        int(arrival.timestamp() * 1000),
    )


def test_a_lambda_event_record_gives_its_shard_from_the_event_id_and_decodes_its_data() -> None:
    event_record = {
        "eventID": "shardId-000000000006:49590338271490256608559692538361571095921575989136588898",
        "kinesis": {
            "partitionKey": "s",
            "sequenceNumber": "49590338271490256608559692538361571095921575989136588898",
            "data": base64.b64encode(b"\xf3payload").decode(),
            "approximateArrivalTimestamp": 1545084650.987,
        },
    }
    source = SourceRecord.from_lambda(event_record)
    assert source.shard_id == "shardId-000000000006"
    assert source.sequence_number.startswith("4959033827")
    assert source.data == b"\xf3payload"
    assert source.arrival_ms == 1545084650987


def test_records_aggregated_by_awss_own_aggregator_read_the_same() -> None:
    """An independent writer (aws-kinesis-agg) packs our StreamMessages: the consumer reads
    each with its partition key as its stream id."""
    aggregator = RecordAggregator()
    for stream, seq in (("a", 1), ("b", 1), ("a", 2)):
        data = encode_message(epoch_prefix(3), seq, 10, b'{"k":1}', "json")
        assert aggregator.add_user_record(stream, data) is None
    key, _, data = aggregator.clear_and_get().get_contents()
    consumer = Consumer(MemoryWatermarks())
    batch = consumer.process(SHARD, [record(data, key)])
    assert [(m.stream_id, m.epoch, m.seq, m.payload) for m in batch.messages] == [
        ("a", 3, 1, b'{"k":1}'),
        ("b", 3, 1, b'{"k":1}'),
        ("a", 3, 2, b'{"k":1}'),
    ]
    assert batch.problems == []


def test_a_plain_json_line_reads_as_the_aggregated_message_does() -> None:
    message = Message("s", 2, 5, '{"a":"é"}'.encode(), "json", 77)
    [from_json] = Consumer(MemoryWatermarks()).process(SHARD, [plain(message)]).messages
    [from_kpl] = Consumer(MemoryWatermarks()).process(SHARD, [aggregated([message])]).messages
    expected = ("s", 2, 5, 77, '{"a":"é"}'.encode(), "json", WORKER)
    assert from_json[:7] == from_kpl[:7] == expected


def _aggregate_of(*user_data: bytes) -> bytes:
    aggregator = Aggregator("w")
    for data in user_data:
        aggregator.add("s", data)
    return aggregator.encode()


GOOD = encode_message(epoch_prefix(1), 1, 1, b"{}", "json")
BAD_RECORDS = {
    "not_ours": record(b"plain text from another producer " + SECRET),
    "not_ours ": record(b'{"someone": "else", "x": "' + SECRET + b'"}'),
    "truncated": record(MAGIC + b"\x0a\x01"),
    "digest_mismatch": record(_aggregate_of(GOOD)[:-5]),
    "digest_mismatch ": record(_aggregate_of(GOOD)[:-16] + b"\x00" * 16),
    # A records field that claims 5 bytes and has 2, under a digest that matches.
    "bad_aggregate": record(
        MAGIC + b"\x1a\x05\x08\x09" + hashlib.md5(b"\x1a\x05\x08\x09").digest()
    ),
    "bad_message": record(_aggregate_of(b"\x08" + SECRET)),
    "unknown_encoding": record(_aggregate_of(b"\x08\x01\x10\x01\x18\x01\x20\x07\x2a\x00")),
    "unknown_encoding ": record(
        json.dumps(
            {
                "stream_id": "s",
                "epoch": 1,
                "seq": 1,
                "received_at_ms": 1,
                "payload_encoding": "zstd",
                "payload": SECRET.decode(),
            }
        ).encode()
    ),
    "bad_message  ": record(
        b'{"stream_id":"s","epoch":1,"seq":-1,"received_at_ms":1,'
        b'"payload_encoding":"text","payload":"x"}'
    ),
    "bad_message   ": record(_aggregate_of(b"\x08\x01\x10" + varint(2**63) + b"\x18\x01\x2a\x00")),
    "bad_payload": record(_aggregate_of(encode_message(epoch_prefix(1), 1, 1, SECRET, "json"))),
    "bad_payload ": record(
        _aggregate_of(encode_message(epoch_prefix(1), 1, 1, b"\xff\xfe" + SECRET, "text"))
    ),
    "bad_payload  ": record(
        b'{"stream_id":"s","epoch":1,"seq":1,"received_at_ms":1,'
        b'"payload_encoding":"base64","payload":"**' + SECRET + b'"}'
    ),
}


@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_bad_input_is_reported_with_its_shard_sequence_number_and_kind(name: str) -> None:
    bad = BAD_RECORDS[name]
    consumer = read(bad)
    (problem,) = consumer.problems
    assert problem.shard_id == SHARD
    assert problem.sequence_number == bad.sequence_number
    assert problem.kind == ProblemKind(name.strip())
    assert problem.detail and len(problem.detail) < 120
    assert SECRET.decode() not in problem.detail
    assert consumer.problem_counts == {name.strip(): 1}


def test_every_problem_kind_has_a_case() -> None:
    assert {name.strip() for name in BAD_RECORDS} == set(ProblemKind)


def test_a_bad_user_record_spoils_only_itself_and_the_batch_goes_on() -> None:
    data = _aggregate_of(
        encode_message(epoch_prefix(1), 1, 1, b"{}", "json"),
        b"\x08" + SECRET,
        encode_message(epoch_prefix(1), 2, 1, b"{}", "json"),
    )
    consumer = Consumer(MemoryWatermarks())
    batch = consumer.process(SHARD, [record(data), aggregated([json_seq("s", 1, 3)])])
    assert [m.seq for m in batch.messages] == [1, 2, 3]
    (problem,) = batch.problems
    assert problem.kind == "bad_message"
    assert problem.detail.startswith("user record 2 of 3:")
    assert batch.problems == consumer.problems
