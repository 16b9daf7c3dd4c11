"""The KPL aggregation format and the stream messages in it, checked against readers that share
no code with ours: AWS's Python deaggregation module (``aws-kinesis-agg``) for the container, and
protobuf's own runtime, built from the published schema, for each message."""

from __future__ import annotations

import base64
import hashlib

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from aws_kinesis_agg.deaggregator import iter_deaggregate_records
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlease.kinesis_records import (
    decode_message,
    encode_message,
    epoch_prefix,
    read_record,
)
from streamlease.kpl import MAGIC, AggregationError, Aggregator, deaggregate, hash_key
from streamlease.sink_fields import PayloadEncoding


def _stream_message_class() -> type:
    """``StreamMessage`` as protobuf's runtime builds it from the schema in
    :mod:`streamlease.kinesis_records`' docstring."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="stream_message.proto", package="t", syntax="proto3"
    )
    enum = proto.enum_type.add(name="Encoding")
    for number, name in enumerate(("JSON", "TEXT", "BINARY")):
        enum.value.add(name=name, number=number)
    message = proto.message_type.add(name="StreamMessage")
    field = descriptor_pb2.FieldDescriptorProto
    for number, name in enumerate(("epoch", "seq", "received_at_ms"), start=1):
        message.field.add(
            name=name, number=number, type=field.TYPE_UINT64, label=field.LABEL_OPTIONAL
        )
    message.field.add(
        name="encoding",
        number=4,
        type=field.TYPE_ENUM,
        type_name=".t.Encoding",
        label=field.LABEL_OPTIONAL,
    )
    message.field.add(name="payload", number=5, type=field.TYPE_BYTES, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.StreamMessage"))


StreamMessageProto = _stream_message_class()


def independently_deaggregated(data: bytes, key: str) -> list[tuple[str, bytes]]:
    """(partition key, data) of each user record, as aws-kinesis-agg reads a Kinesis record
    that boto3's ``get_records`` returned."""
    record = {
        "SequenceNumber": "1",
        "PartitionKey": key,
        "ApproximateArrivalTimestamp": 0,
        "Data": data,
    }
    users = list(iter_deaggregate_records([record], data_format="Boto3"))
    assert all(u["kinesis"].get("aggregated") for u in users), "not read as aggregated"
    return [(u["kinesis"]["partitionKey"], base64.b64decode(u["kinesis"]["data"])) for u in users]


messages = st.lists(
    st.tuples(
        st.sampled_from(["a:1", "b.2", "meeting:2026-11-30.7", "x" * 128]),
        st.integers(0, 2**40),
        st.integers(0, 2**50),
        st.binary(max_size=300),
        st.sampled_from(list(PayloadEncoding)),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(messages)
def test_aggregate_then_deaggregate_independently_gives_every_message_in_order(
    batch: list[tuple[str, int, int, bytes, str]],
) -> None:
    """aws-kinesis-agg reads our aggregated record back into the same user records, in order,
    each with its own partition key; protobuf's runtime reads each message's epoch, seq, time
    and payload."""
    aggregator = Aggregator("worker-7/42-ab12")
    for stream, epoch, seq, payload, encoding in batch:
        aggregator.add(
            stream,
            encode_message(epoch_prefix(epoch), seq, 1_700_000_000_000 + seq, payload, encoding),
        )
    data = aggregator.encode()
    assert aggregator.size == len(data)
    assert aggregator.count == len(batch)
    users = independently_deaggregated(data, batch[0][0])
    assert [key for key, _ in users] == [m[0] for m in batch]
    codes = {PayloadEncoding.JSON: 0, PayloadEncoding.TEXT: 1, PayloadEncoding.BASE64: 2}
    for (_, body), (_, epoch, seq, payload, encoding) in zip(users, batch, strict=True):
        decoded = StreamMessageProto.FromString(body)
        assert (decoded.epoch, decoded.seq, decoded.received_at_ms) == (
            epoch,
            seq,
            1_700_000_000_000 + seq,
        )
        assert (decoded.payload, decoded.encoding) == (payload, codes[encoding])


def test_our_reader_reads_what_the_kpl_module_aggregates() -> None:
    """The other direction: records aggregated by aws-kinesis-agg, read by ours."""
    aggregator = RecordAggregator()
    sent = [(f"s{n % 3}", b"%d" % n) for n in range(20)]
    for key, data in sent:
        assert aggregator.add_user_record(key, data) is None
    key, _, data = aggregator.clear_and_get().get_contents()
    unpacked = deaggregate(data, key)
    assert unpacked.aggregated
    assert [(r.partition_key, r.data) for r in unpacked.records] == sent


def test_a_partition_key_is_written_once_per_aggregated_record() -> None:
    """Ten messages of one stream: its id appears once in the bytes."""
    aggregator = Aggregator()
    for seq in range(10):
        aggregator.add(
            "stream-with-a-long-id", encode_message(epoch_prefix(3), seq, 0, b"{}", "json")
        )
    assert aggregator.encode().count(b"stream-with-a-long-id") == 1


def test_size_with_says_what_one_more_record_makes() -> None:
    aggregator = Aggregator("w")
    for n, key in enumerate(["a", "b", "a", "c" * 300]):
        data = b"x" * (n * 70)
        expected = aggregator.size_with(key, len(data))
        aggregator.add(key, data)
        assert aggregator.size == expected == len(aggregator.encode())


def test_read_record_names_stream_epoch_seq_and_worker() -> None:
    aggregator = Aggregator("worker-1")
    aggregator.add("s", encode_message(epoch_prefix(5), 9, 1234, b'{"a":1}', "json"))
    aggregator.add("t", encode_message(epoch_prefix(6), 1, 1235, b"\x00\xff", "base64"))
    got = read_record(aggregator.encode(), "s")
    assert [
        (m.stream_id, m.epoch, m.seq, m.received_at_ms, m.payload, m.payload_encoding, m.worker_id)
        for m in got
    ] == [
        ("s", 5, 9, 1234, b'{"a":1}', "json", "worker-1"),
        ("t", 6, 1, 1235, b"\x00\xff", "base64", "worker-1"),
    ]


def test_a_record_that_is_not_aggregated_is_one_user_record() -> None:
    unpacked = deaggregate(b'{"plain": true}', "k")
    assert not unpacked.aggregated
    assert [(r.partition_key, r.data) for r in unpacked.records] == [("k", b'{"plain": true}')]


def test_a_damaged_aggregated_record_is_refused() -> None:
    aggregator = Aggregator()
    aggregator.add("s", b"data")
    data = bytearray(aggregator.encode())
    data[len(MAGIC) + 3] ^= 0xFF
    with pytest.raises(AggregationError, match="MD5"):
        deaggregate(bytes(data), "s")
    with pytest.raises(AggregationError):
        decode_message("s", b"\x08")


def test_hash_key_is_kinesis_md5_mapping() -> None:
    assert hash_key("abc") == int(hashlib.md5(b"abc").hexdigest(), 16)
