"""The Kinesis sink against the moto server: batching, partition keys, retry of only the failed
records, giving up with SinkError, fencing, and group commit across the batches of many streams —
each with aggregation on (KPL aggregated records, the default) and off (a JSON record per
message)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Any

import pytest

from streamlease import aws
from streamlease.errors import SinkDeadlinePassed, SinkError
from streamlease.kinesis_records import StreamMessage, read_record
from streamlease.kpl import hash_key
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


def big_record(seq: int) -> SinkRecord:
    """A message too large to share an aggregated record (30 KB): one Kinesis record each,
    aggregated or not, so a test can fail one record and name the message in it."""
    payload = b'{"seq":%d,"pad":"%s"}' % (seq, b"x" * 30_000)
    return SinkRecord(seq, 1_700_000_000_000, payload)


async def write(
    sink: KinesisSink,
    stream_id: str,
    seqs: list[int],
    deadline: Deadline = ALWAYS,
    *,
    big: bool = False,
) -> None:
    """One batch of ``stream_id``: submitted, and waited for until it is settled."""
    records = [big_record(n) if big else record(n) for n in seqs]
    await write_batch(sink, header(stream_id), records, deadline)


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

    def list_shards(self, **kwargs: Any) -> Any:
        return self.real.list_shards(**kwargs)

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


def read_stream(settings: Settings) -> list[StreamMessage]:
    """Every message in the Kinesis stream, shard by shard, each Kinesis record read back
    (deaggregated when aggregated); the partition key is always the stream id."""
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
            for r in page["Records"]:
                messages = read_record(r["Data"], r["PartitionKey"])
                if len(messages) == 1:
                    assert r["PartitionKey"] == messages[0].stream_id
                out += messages
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return out


def sent_seqs(call: list[dict[str, Any]]) -> list[int]:
    """The seqs of the messages one recorded PutRecords call carried."""
    return [m.seq for r in call for m in read_record(r["Data"], r["PartitionKey"])]


def seqs_by_stream(messages: list[StreamMessage]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for message in messages:
        found.setdefault(message.stream_id, []).append(message.seq)
    return {key: sorted(seqs) for key, seqs in found.items()}


@pytest.fixture(params=[True, False], ids=["aggregated", "record-per-message"])
def aws_settings(aws_settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The moto server's resources, with aggregation on or off."""
    return dataclasses.replace(aws_settings, kinesis_aggregation=request.param)


@pytest.fixture
def client(aws_settings: Settings) -> Any:
    return aws.client("kinesis", aws_settings)


async def test_records_land_once_with_the_stream_id_as_partition_key(
    aws_settings: Settings, client: Any
) -> None:
    """Every message lands once, under its stream id, with its epoch, seq, time and payload;
    aggregated, the three share one Kinesis record, else each is its own (the encoded record)."""
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording)
    sent = [(header("a:1"), record(1)), (header("b.2"), record(1)), (header("a:1"), record(2))]
    await asyncio.gather(write(sink, "a:1", [1, 2]), write(sink, "b.2", [1]))
    await sink.close()
    stored = read_stream(aws_settings)
    assert seqs_by_stream(stored) == {"a:1": [1, 2], "b.2": [1]}
    assert sorted(
        (m.stream_id, m.epoch, m.seq, m.received_at_ms, m.payload, m.worker_id) for m in stored
    ) == sorted(
        (h.stream_id, h.epoch, r.seq, r.received_at_ms, r.payload, h.worker_id) for h, r in sent
    )
    if aws_settings.kinesis_aggregation:
        assert [len(call) for call in recording.calls] == [1]
        assert (sink.records, sink.messages) == (1, 3)
    else:
        sent_data = [r["Data"] for call in recording.calls for r in call]
        assert sorted(sent_data) == sorted(encode_record(h, r) for h, r in sent)
        assert all(len({r["PartitionKey"] for r in c}) == len(c) for c in recording.calls)
        assert (sink.records, sink.messages) == (3, 3)


async def test_only_the_failed_records_are_retried(aws_settings: Settings, client: Any) -> None:
    """A partial failure resends just the messages of the throttled record; nothing is
    duplicated or lost."""
    recording = RecordingClient(client, fail_indexes={0: {1}})
    sink = KinesisSink(aws_settings, client=recording, backoff_base_seconds=0.01)
    await asyncio.gather(*(write(sink, s, [1], big=True) for s in ("s", "t", "u", "v")))
    await sink.close()
    assert [len(call) for call in recording.calls] == [4, 1]
    assert sent_seqs(recording.calls[1]) == [1]
    assert seqs_by_stream(read_stream(aws_settings)) == {s: [1] for s in ("s", "t", "u", "v")}


async def test_a_refused_record_never_lets_a_later_message_of_its_stream_land_first(
    aws_settings: Settings, client: Any
) -> None:
    """Kinesis stores the records of a call that it takes even when an earlier one of the call
    is refused: a stream's messages go into one record per call, so after the retry its shard
    holds them in seq order (a reader that drops seqs at or below the last it emitted would
    otherwise lose the refused ones)."""
    recording = RecordingClient(client, fail_indexes={0: {0}})
    sink = KinesisSink(aws_settings, client=recording, backoff_base_seconds=0.01)
    await write(sink, "s", [1, 2, 3, 4], big=True)
    await sink.close()
    assert [m.seq for m in read_stream(aws_settings)] == [1, 2, 3, 4]
    assert [sent_seqs(call) for call in recording.calls] == [[1], [1], [2], [3], [4]]


async def test_a_record_failing_every_attempt_fails_its_batch(
    aws_settings: Settings, client: Any
) -> None:
    """After sink_max_attempts the batch fails with SinkError naming the Kinesis error
    code."""
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
    more is sent — not even a retry — and the batch fails naming the records not stored, so
    the holder neither acknowledges them nor sends the stored ones again."""
    settings = dataclasses.replace(aws_settings, sink_max_attempts=100)
    # One record of a stream per call: 1 and 2 go through, 3 (then 4) never does.
    failing = {n: {0} for n in range(2, 100)}
    recording = RecordingClient(client, fail_indexes=failing)
    recording.delay_seconds = 0.1
    sink = KinesisSink(settings, client=recording, backoff_base_seconds=0.05)
    deadline = In(0.5)
    with pytest.raises(SinkDeadlinePassed) as cut:
        await write(sink, "s", [1, 2, 3, 4], deadline, big=True)
    await sink.close()
    assert recording.started and all(t < deadline.at for t in recording.started)
    assert [r.seq for r in cut.value.unsent or []] == [3, 4]
    assert seqs_by_stream(read_stream(aws_settings)) == {"s": [1, 2]}


async def test_a_batch_after_the_deadline_sends_nothing(
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
    takes a batch's messages into a call, so a deadline passes halfway through."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class Fixed:
    """A deadline ``seconds`` after the moment the sink reads it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def remaining_seconds(self) -> float:
        return self.seconds


@pytest.mark.parametrize("aws_settings", [True], ids=["aggregated"], indirect=True)
async def test_a_batch_whose_deadline_passes_while_its_records_are_taken_sends_none_of_them(
    aws_settings: Settings, client: Any
) -> None:
    """The batch fails naming all its records unsent, so none may be sent: those taken into
    the call before the deadline passed would otherwise be stored and then sent again.
    (Aggregated only: a record a message takes one message of a stream per call.)"""
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording, linger_seconds=0, clock=Ticking())
    with pytest.raises(SinkDeadlinePassed) as cut:
        await write(sink, "s", [1, 2, 3, 4], Fixed(2.5))
    await sink.close()
    assert recording.calls == []
    assert [r.seq for r in cut.value.unsent or []] == [1, 2, 3, 4]


async def test_a_call_queued_behind_a_busy_sink_thread_is_not_sent_once_its_deadline_passed(
    aws_settings: Settings, client: Any
) -> None:
    """The deadline was fine when the batch was taken, but the sink's thread was busy until
    after it: the thread looks again right before PutRecords and sends nothing of that batch;
    another batch in the same call, still inside its deadline, is sent."""
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording, linger_seconds=0)
    await write(sink, "warm", [1])  # the shard map is read: nothing else queues
    release = threading.Event()
    busy = sink._thread.run(release.wait, 5.0)  # the sink's own thread, saturated
    late, fine = In(0.3), In(60.0)
    cut = asyncio.create_task(write(sink, "late", [1, 2], late))
    kept = asyncio.create_task(write(sink, "fine", [1], fine))
    await asyncio.sleep(0.5)  # both taken into one batch; their call waits for the thread
    release.set()
    await busy
    with pytest.raises(SinkDeadlinePassed) as refused:
        await cut
    await kept
    await sink.close()
    sent = [
        [m.stream_id for r in call for m in read_record(r["Data"], r["PartitionKey"])]
        for call in recording.calls
    ]
    assert sent == [["warm"], ["fine"]]
    assert [r.seq for r in refused.value.unsent or []] == [1, 2]
    assert seqs_by_stream(read_stream(aws_settings)) == {"fine": [1], "warm": [1]}


async def test_records_in_flight_when_the_flusher_stops_are_settled_by_their_answer(
    aws_settings: Settings, client: Any
) -> None:
    """The flusher is cancelled while a call is under way: the call cannot be recalled, so its
    answer is awaited first and the records it stored are acknowledged, not reported unsent
    (the holder would send them again)."""
    recording = RecordingClient(client)
    recording.delay_seconds = 0.4
    sink = KinesisSink(aws_settings, client=recording, linger_seconds=0)
    writing = asyncio.gather(write(sink, "s", [1]), write(sink, "t", [1]))
    await asyncio.sleep(0.1)
    flusher = sink._flusher
    assert flusher is not None and recording.calls
    flusher.cancel()
    await writing  # stored: no SinkError naming them unsent
    with pytest.raises(asyncio.CancelledError):
        await flusher
    assert seqs_by_stream(read_stream(aws_settings)) == {"s": [1], "t": [1]}


def test_the_sink_client_times_out_within_half_the_fence_margin(aws_settings: Settings) -> None:
    """A call started just before the deadline ends within about twice the client's timeout,
    inside the fence margin (the default: half of it)."""
    config = KinesisSink(aws_settings)._client.meta.config
    half_margin = aws_settings.fence_margin_seconds / 2
    assert (config.connect_timeout, config.read_timeout) == (half_margin, half_margin)


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
    assert max(len(call) for call in recording.calls) <= 500
    assert sum(len(sent_seqs(call)) for call in recording.calls) == 1200
    # A record a message carries one message of each stream per call (their order holds).
    assert len(recording.calls) < (10 if aws_settings.kinesis_aggregation else 25)
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
    assert [len(sent_seqs(call)) for call in recording.calls] == [20]


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


@pytest.mark.parametrize("aws_settings", [True], ids=["aggregated"], indirect=True)
async def test_an_aggregated_record_leaves_out_a_batch_whose_deadline_passed(
    aws_settings: Settings, client: Any
) -> None:
    """Two batches share a call: the one whose deadline passes while its messages are taken
    sends none of them (all named unsent); the other's are stored."""
    recording = RecordingClient(client)
    sink = KinesisSink(aws_settings, client=recording, linger_seconds=0.05, clock=Ticking())
    late = asyncio.create_task(write(sink, "late", [1, 2, 3, 4], Fixed(2.5)))
    on_time = asyncio.create_task(write(sink, "ok", [1, 2, 3, 4]))
    with pytest.raises(SinkDeadlinePassed) as cut:
        await late
    await on_time
    await sink.close()
    assert [r.seq for r in cut.value.unsent or []] == [1, 2, 3, 4]
    assert seqs_by_stream(read_stream(aws_settings)) == {"ok": [1, 2, 3, 4]}


@pytest.fixture
def sharded(aws_settings: Settings) -> Settings:
    """A stream of its own with four shards."""
    kinesis = aws.client("kinesis", aws_settings)
    name = f"{aws_settings.kinesis_stream_name}-4"
    kinesis.create_stream(StreamName=name, ShardCount=4)
    kinesis.get_waiter("stream_exists").wait(StreamName=name)
    return dataclasses.replace(aws_settings, kinesis_stream_name=name)


def shard_ranges(settings: Settings) -> dict[str, tuple[int, int]]:
    kinesis = aws.client("kinesis", settings)
    shards = kinesis.list_shards(StreamName=settings.kinesis_stream_name)["Shards"]
    return {
        s["ShardId"]: (
            int(s["HashKeyRange"]["StartingHashKey"]),
            int(s["HashKeyRange"]["EndingHashKey"]),
        )
        for s in shards
    }


def kcl_view(settings: Settings) -> dict[str, list[int]]:
    """Seqs by stream as the KCL hands them over: a message read from a shard whose hash key
    range does not hold its partition key is dropped (the KCL's deaggregation does so)."""
    kinesis = aws.client("kinesis", settings)
    ranges = shard_ranges(settings)
    found: dict[str, list[int]] = {}
    for shard_id, (low, high) in ranges.items():
        iterator = kinesis.get_shard_iterator(
            StreamName=settings.kinesis_stream_name,
            ShardId=shard_id,
            ShardIteratorType="TRIM_HORIZON",
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for r in page["Records"]:
                for m in read_record(r["Data"], r["PartitionKey"]):
                    if low <= hash_key(m.stream_id) <= high:
                        found.setdefault(m.stream_id, []).append(m.seq)
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return found


async def test_messages_are_aggregated_per_shard_and_land_where_the_kcl_keeps_them(
    sharded: Settings, client: Any
) -> None:
    """40 streams over four shards: one aggregated record per shard, and every message in a
    shard whose range holds its stream id, in order."""
    recording = RecordingClient(client)
    sink = KinesisSink(sharded, client=recording)
    async with asyncio.TaskGroup() as group:
        for n in range(40):
            group.create_task(write(sink, f"s{n}", [1, 2, 3, 4, 5]))
    await sink.close()
    expected = {f"s{n}": [1, 2, 3, 4, 5] for n in range(40)}
    assert kcl_view(sharded) == expected
    if sharded.kinesis_aggregation:
        assert sum(len(call) for call in recording.calls) <= 4 * len(recording.calls)
        assert sink.messages == 200


class StaleShardMap(RecordingClient):
    """The first ListShards answer is the map before a reshard: two shards (of ids the stream
    no longer has) halving the key space, where the stream now has four."""

    def __init__(self, real: Any) -> None:
        super().__init__(real)
        self.listed = 0

    def list_shards(self, **kwargs: Any) -> Any:
        self.listed += 1
        if self.listed > 1:
            return self.real.list_shards(**kwargs)
        half = 2**127
        return {
            "Shards": [
                {
                    "ShardId": f"shardId-parent-{n}",
                    "HashKeyRange": {"StartingHashKey": str(low), "EndingHashKey": str(high)},
                    "SequenceNumberRange": {"StartingSequenceNumber": "0"},
                }
                for n, (low, high) in enumerate([(0, half - 1), (half, 2**128 - 1)])
            ]
        }


async def test_after_a_reshard_messages_outside_the_shard_a_record_landed_on_are_sent_again(
    sharded: Settings, client: Any
) -> None:
    """The sink's shard map is stale (the stream was resharded since it read it): a record
    lands on a shard that covers only part of its messages. Those are stored; the rest are sent
    again to their own shard, so the KCL (which drops a message read from a shard that does not
    cover its key) sees every message exactly once."""
    if not sharded.kinesis_aggregation:
        pytest.skip("records of one message go where their key says")
    stale = StaleShardMap(client)
    sink = KinesisSink(sharded, client=stale, backoff_base_seconds=0.01)
    await asyncio.gather(*(write(sink, f"s{n}", [1, 2, 3]) for n in range(40)))
    await sink.close()
    assert stale.listed == 2
    assert len(stale.calls) >= 2
    assert kcl_view(sharded) == {f"s{n}": [1, 2, 3] for n in range(40)}
