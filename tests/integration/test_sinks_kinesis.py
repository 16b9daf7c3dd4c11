"""The Kinesis sink against the moto server: batching, partition keys, retry of only the failed
records, giving up with SinkError, and group commit across the batches of many streams."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import pytest

from streamlease import aws
from streamlease.errors import SinkDeadlinePassed, SinkError
from streamlease.schema import SinkField
from streamlease.settings import Settings
from worker.sinks import (
    BatchHeader,
    Deadline,
    KinesisSink,
    NoDeadline,
    SinkRecord,
    encode_record,
    write_batch,
)

ALWAYS = NoDeadline()
"""No fencing deadline: these tests are about the sink alone."""


def header(stream_id: str) -> BatchHeader:
    return BatchHeader(stream_id, 2, "w-1")


def record(seq: int) -> SinkRecord:
    return SinkRecord(seq, 1_700_000_000_000, b'{"seq":%d}' % seq)


async def write(
    sink: KinesisSink, stream_id: str, seqs: list[int], deadline: Deadline = ALWAYS
) -> None:
    """One batch of ``stream_id``: submitted, and waited for until it is settled."""
    await write_batch(sink, header(stream_id), [record(n) for n in seqs], deadline)


class RecordingClient:
    """The real client, with every PutRecords request recorded and failures scripted.

    ``fail_indexes[n]`` lists record positions of call ``n`` that are withheld from Kinesis and
    reported back as throttled, exactly as a partial failure looks.
    """

    def __init__(self, real: Any, fail_indexes: dict[int, set[int]] | None = None) -> None:
        self.real = real
        self.fail_indexes = fail_indexes or {}
        self.calls: list[list[dict[str, Any]]] = []
        self.started: list[float] = []

    delay_seconds = 0.0
    """How long each call takes on top of Kinesis (a slow sink)."""

    def put_records(self, *, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        call = len(self.calls)
        self.calls.append(Records)
        self.started.append(time.monotonic())
        if self.delay_seconds:
            time.sleep(self.delay_seconds)
        failing = self.fail_indexes.get(call, set())
        sent = [r for i, r in enumerate(Records) if i not in failing]
        results = iter(
            self.real.put_records(StreamName=StreamName, Records=sent)["Records"] if sent else []
        )
        throttled = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"}
        return {
            "FailedRecordCount": len(failing),
            "Records": [throttled if i in failing else next(results) for i in range(len(Records))],
        }


def read_stream(settings: Settings) -> list[tuple[str, dict[str, Any]]]:
    """Every (partition key, record) in the Kinesis stream, shard by shard."""
    kinesis = aws.client("kinesis", settings)
    out = []
    for shard in kinesis.list_shards(StreamName=settings.kinesis_stream_name)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=settings.kinesis_stream_name,
            ShardId=shard["ShardId"],
            ShardIteratorType="TRIM_HORIZON",
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            out += [(r["PartitionKey"], json.loads(r["Data"])) for r in page["Records"]]
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return out


def seqs_by_stream(rows: list[tuple[str, dict[str, Any]]]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for key, body in rows:
        assert key == body[SinkField.STREAM_ID]
        found.setdefault(key, []).append(body[SinkField.SEQ])
    return {key: sorted(seqs) for key, seqs in found.items()}


@pytest.fixture
def client(aws_settings: Settings) -> Any:
    return aws.client("kinesis", aws_settings)


async def test_records_land_once_with_the_stream_id_as_partition_key(
    aws_settings: Settings, client: Any
) -> None:
    """Each record is one Kinesis record: data is the encoded record, key is the stream id."""
    sink = KinesisSink(aws_settings, client=client)
    await asyncio.gather(write(sink, "a:1", [1, 2]), write(sink, "b.2", [1]))
    await sink.close()
    rows = read_stream(aws_settings)
    assert seqs_by_stream(rows) == {"a:1": [1, 2], "b.2": [1]}
    assert {json.dumps(body, separators=(",", ":")).encode() for _, body in rows} == {
        encode_record(header("a:1"), record(1)),
        encode_record(header("b.2"), record(1)),
        encode_record(header("a:1"), record(2)),
    }


async def test_only_the_failed_records_are_retried(aws_settings: Settings, client: Any) -> None:
    """A partial failure resends just the throttled record; nothing is duplicated or lost."""
    recording = RecordingClient(client, fail_indexes={0: {1}})
    sink = KinesisSink(aws_settings, client=recording, backoff_base_seconds=0.01)
    await write(sink, "s", [1, 2, 3, 4])
    await sink.close()
    assert [len(call) for call in recording.calls] == [4, 1]
    assert json.loads(recording.calls[1][0]["Data"])[SinkField.SEQ] == 2
    assert seqs_by_stream(read_stream(aws_settings)) == {"s": [1, 2, 3, 4]}


async def test_a_record_failing_every_attempt_fails_the_write(
    aws_settings: Settings, client: Any
) -> None:
    """After sink_max_attempts the write raises SinkError naming the Kinesis error code."""
    settings = dataclasses.replace(aws_settings, sink_max_attempts=3)
    recording = RecordingClient(client, fail_indexes={n: {0} for n in range(10)})
    sink = KinesisSink(settings, client=recording, backoff_base_seconds=0.001)
    with pytest.raises(SinkError, match="ProvisionedThroughputExceeded"):
        await write(sink, "s", [1])
    await sink.close()
    assert len(recording.calls) == 3


class In:
    """A fencing deadline ``seconds`` from now."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def remaining_seconds(self) -> float:
        return self.at - time.monotonic()


async def test_no_retry_is_sent_after_the_deadline_and_the_unsent_are_named(
    aws_settings: Settings, client: Any
) -> None:
    """A slow sink whose calls keep partly failing: once the holder's deadline passes nothing
    more is sent — not even a retry — and the write fails naming the records not stored, so
    the holder neither acknowledges them nor sends the stored ones again."""
    settings = dataclasses.replace(aws_settings, sink_max_attempts=100)
    failing = {0: {2, 3}} | {n: {0, 1} for n in range(1, 100)}  # 3 and 4 never get through
    recording = RecordingClient(client, fail_indexes=failing)
    recording.delay_seconds = 0.1
    sink = KinesisSink(settings, client=recording, backoff_base_seconds=0.05)
    deadline = In(0.5)
    with pytest.raises(SinkDeadlinePassed) as cut:
        await write(sink, "s", [1, 2, 3, 4], deadline)
    await sink.close()
    assert recording.started and all(t < deadline.at for t in recording.started)
    assert [r.seq for r in cut.value.unsent or []] == [3, 4]
    assert seqs_by_stream(read_stream(aws_settings)) == {"s": [1, 2]}


async def test_a_write_after_the_deadline_sends_nothing(
    aws_settings: Settings, client: Any
) -> None:
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording)
    with pytest.raises(SinkDeadlinePassed) as cut:
        await write(sink, "s", [1], In(-1.0))
    await sink.close()
    assert recording.calls == []
    assert [r.seq for r in cut.value.unsent or []] == [1]


class Ticking:
    """A monotonic clock that moves a second each time it is read: the sink's clock while it
    takes a batch's records into a call, so the deadline passes halfway through."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class Fixed:
    """A deadline ``seconds`` after the first time it is asked (read once per call)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def remaining_seconds(self) -> float:
        return self.seconds


async def test_a_write_whose_deadline_passes_while_its_records_are_taken_sends_none_of_them(
    aws_settings: Settings, client: Any
) -> None:
    """The write fails naming all its records unsent, so none may be sent: the two taken into
    the batch before the deadline passed would otherwise be stored and then sent again."""
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording, linger_seconds=0, clock=Ticking())
    with pytest.raises(SinkDeadlinePassed) as cut:
        await write(sink, "s", [1, 2, 3, 4], Fixed(3.5))
    await sink.close()
    assert recording.calls == []
    assert [r.seq for r in cut.value.unsent or []] == [1, 2, 3, 4]


def test_the_sink_client_never_retries_behind_the_sinks_back(aws_settings: Settings) -> None:
    """botocore's own retries would send after the deadline: the sink's client makes one
    attempt per call and the sink decides about retries."""
    sink = KinesisSink(aws_settings)
    assert sink._client.meta.config.retries["total_max_attempts"] == 1


async def test_a_missing_stream_fails_at_once_without_retries(aws_settings: Settings) -> None:
    """ResourceNotFound will not heal by retrying: one call, then SinkError."""
    settings = dataclasses.replace(aws_settings, kinesis_stream_name="no-such-stream")
    recording = RecordingClient(aws.client("kinesis", settings))
    sink = KinesisSink(settings, client=recording)
    with pytest.raises(SinkError, match="ResourceNotFound"):
        await write(sink, "s", [1])
    await sink.close()
    assert len(recording.calls) == 1


async def test_the_batches_of_many_streams_share_putrecords_calls_of_at_most_500(
    aws_settings: Settings, client: Any
) -> None:
    """60 streams submitting 20 records each at once: few calls, none over the Kinesis
    limit."""
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording)
    async with asyncio.TaskGroup() as group:
        for n in range(60):
            group.create_task(write(sink, f"s{n}", list(range(1, 21))))
    await sink.close()
    sizes = [len(call) for call in recording.calls]
    assert sum(sizes) == 1200
    assert max(sizes) <= 500
    assert len(sizes) < 10
    found = seqs_by_stream(read_stream(aws_settings))
    assert found == {f"s{n}": list(range(1, 21)) for n in range(60)}


async def test_batches_that_trickle_in_wait_for_each_other_briefly(
    aws_settings: Settings, client: Any
) -> None:
    """Streams submitting one record each, a few milliseconds apart, as 1,000 streams at
    10 msg/s do: the store lingers for more instead of one PutRecords call per record. Without
    it each call would carry one or two records (a call costs the worker a millisecond of
    CPU)."""
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording, linger_seconds=0.2)

    async def one(n: int) -> None:
        await asyncio.sleep(0.005 * n)
        await write(sink, f"s{n}", [1])

    async with asyncio.TaskGroup() as group:
        for n in range(20):
            group.create_task(one(n))
    await sink.close()
    assert [len(call) for call in recording.calls] == [20]


async def test_close_flushes_what_was_accepted_then_refuses(
    aws_settings: Settings, client: Any
) -> None:
    """Batches accepted are stored before close returns; later ones raise SinkError."""
    sink = KinesisSink(aws_settings, client=client)
    writes = [asyncio.create_task(write(sink, "s", [n])) for n in range(1, 4)]
    await asyncio.sleep(0)
    await sink.close()
    await asyncio.gather(*writes)
    with pytest.raises(SinkError):
        await write(sink, "s", [9])
    assert seqs_by_stream(read_stream(aws_settings)) == {"s": [1, 2, 3]}
