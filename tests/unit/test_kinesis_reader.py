"""The shard reader's rules, on a scripted Kinesis and a recording consumer, in simulated time.

The moto server cannot play a reshard (it keeps writing to a split shard and never ends one),
so the order across parents and children, the pace and the back-off are specified here; reading
the real sink stream is ``tests/integration/test_consume_command.py``'s.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from streamlease.consumer.kinesis_reader import (
    AT_TIMESTAMP,
    BUSY_POLL_SECONDS,
    LATEST,
    KinesisReader,
    StartPosition,
)
from streamlease.errors import SourceError


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "scripted"}}, "GetRecords")


@dataclass
class Shard:
    shard_id: str
    records: list[str]
    parents: tuple[str, ...] = ()
    closed: bool = False


@dataclass
class ScriptedKinesis:
    """Shards, their records (data = a label), and errors to raise on chosen GetRecords calls.
    Iterators are ``shard|position``; every call is logged with the simulated time."""

    shards: list[Shard]
    clock: Clock
    page: int = 2
    errors: dict[int, str] = field(default_factory=dict)
    calls: list[tuple[float, str, str]] = field(default_factory=list)
    iterator_requests: list[dict[str, Any]] = field(default_factory=list)

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        listed = []
        for s in self.shards:
            entry: dict[str, Any] = {
                "ShardId": s.shard_id,
                "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**128 - 1)},
            }
            if s.parents:
                entry["ParentShardId"] = s.parents[0]
            if len(s.parents) > 1:
                entry["AdjacentParentShardId"] = s.parents[1]
            listed.append(entry)
        return {"Shards": listed}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.iterator_requests.append(kwargs)
        shard = self._shard(kwargs["ShardId"])
        kind = kwargs["ShardIteratorType"]
        position = {
            "TRIM_HORIZON": 0,
            "LATEST": len(shard.records),
            "AT_TIMESTAMP": 1,
        }.get(kind)
        if kind == "AFTER_SEQUENCE_NUMBER":
            position = int(kwargs["StartingSequenceNumber"].split("-")[1]) + 1
        return {"ShardIterator": f"{shard.shard_id}|{position}"}

    def get_records(self, *, ShardIterator: str, Limit: int) -> dict[str, Any]:
        shard_id, position_text = ShardIterator.split("|")
        self.calls.append((self.clock.now, "get_records", shard_id))
        code = self.errors.pop(len(self.calls) - 1, None)
        if code:
            raise client_error(code)
        shard = self._shard(shard_id)
        position = int(position_text)
        taken = shard.records[position : position + min(self.page, Limit)]
        end = position + len(taken)
        records = [
            {
                "SequenceNumber": f"{shard_id}-{position + i}",
                "PartitionKey": "s",
                "Data": label.encode(),
                "ApproximateArrivalTimestamp": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            }
            for i, label in enumerate(taken)
        ]
        done = shard.closed and end == len(shard.records)
        page: dict[str, Any] = {
            "Records": records,
            "MillisBehindLatest": 1000 if end < len(shard.records) else 0,
        }
        if not done:
            page["NextShardIterator"] = f"{shard_id}|{end}"
        return page

    def _shard(self, shard_id: str) -> Shard:
        return next(s for s in self.shards if s.shard_id == shard_id)


class Clock:
    """Simulated monotonic time: sleeping moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Batch:
    shard_id: str
    messages: list[Any]
    problems: list[Any] = field(default_factory=list)


@dataclass
class RecordingConsumer:
    """What the reader asks of a consumer: opens, batches, commits, in order."""

    log: list[tuple[str, Any, ...]] = field(default_factory=list)

    def open_shard(
        self, shard_id: str, parents: tuple[str, ...] = (), hash_range: Any = None
    ) -> None:
        assert hash_range == (0, 2**128 - 1)
        self.log.append(("open", shard_id, tuple(parents)))

    def process(self, shard_id: str, records: list[Any]) -> Batch:
        labels = [r.data.decode() for r in records]
        self.log.append(("process", shard_id, labels))
        return Batch(shard_id, labels)

    def commit(self, batch: Batch) -> None:
        self.log.append(("commit", batch.shard_id, batch.messages))

    def read(self) -> list[str]:
        return [label for entry in self.log if entry[0] == "process" for label in entry[2]]


def reader(kinesis: ScriptedKinesis, consumer: RecordingConsumer, **kw: Any) -> KinesisReader:
    clock = kinesis.clock
    return KinesisReader(
        kinesis,  # type: ignore[arg-type]
        "sink",
        consumer,  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.sleep,
        rand=lambda: 0.5,
        **kw,
    )


def test_children_are_read_only_after_their_parents_are_read_to_the_end() -> None:
    """A merge's child waits for both parents; the parents are read first, whole."""
    clock = Clock()
    kinesis = ScriptedKinesis(
        [
            Shard("child", ["c1", "c2"], parents=("left", "right")),
            Shard("left", ["l1", "l2", "l3"], closed=True),
            Shard("right", ["r1"], closed=True),
        ],
        clock,
    )
    consumer = RecordingConsumer()
    seen: list[Any] = []
    reader(kinesis, consumer).run(seen.append, until_idle_seconds=3)
    order = consumer.read()
    assert sorted(order) == ["c1", "c2", "l1", "l2", "l3", "r1"]
    assert order.index("c1") > max(order.index("l3"), order.index("r1"))
    opens = [e for e in consumer.log if e[0] == "open"]
    assert ("open", "child", ("left", "right")) in opens
    assert opens[-1][1] == "child"
    # every batch handed on, then committed
    assert [b.messages for b in seen] == [e[2] for e in consumer.log if e[0] == "commit"]


def test_a_child_appearing_while_reading_is_read_from_its_start() -> None:
    """After a split while reading (start LATEST), the children begin at TRIM_HORIZON."""
    clock = Clock()
    parent = Shard("parent", [])
    kinesis = ScriptedKinesis([parent], clock)
    consumer = RecordingConsumer()
    read = reader(kinesis, consumer, start=StartPosition(LATEST), shard_refresh_seconds=2)

    def split(batch: Any) -> None:
        pass

    # the split happens at t=1: the parent gets a last record and ends, two children appear
    original_sleep = clock.sleep

    def sleep(seconds: float) -> None:
        before = clock.now
        original_sleep(seconds)
        if before < 1 <= clock.now and not parent.closed:
            parent.records.append("p-last")
            parent.closed = True
            kinesis.shards += [
                Shard("a", ["a1"], parents=("parent",)),
                Shard("b", ["b1"], parents=("parent",)),
            ]

    read._sleep = sleep
    read.run(split, until_idle_seconds=5)
    assert consumer.read() == ["p-last", "a1", "b1"]
    kinds = {r["ShardId"]: r["ShardIteratorType"] for r in kinesis.iterator_requests}
    assert kinds == {"parent": "LATEST", "a": "TRIM_HORIZON", "b": "TRIM_HORIZON"}


def test_each_shard_is_polled_at_most_five_times_a_second() -> None:
    """A shard with a backlog is read every 0.2 s, a caught-up one every idle period."""
    clock = Clock()
    kinesis = ScriptedKinesis([Shard("s", [f"m{i}" for i in range(20)])], clock, page=2)
    consumer = RecordingConsumer()
    reader(kinesis, consumer, idle_poll_seconds=1.0).run(lambda b: None, until_idle_seconds=3)
    times = [t for t, _, _ in kinesis.calls]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= BUSY_POLL_SECONDS - 1e-9
    assert gaps[:9] == pytest.approx([BUSY_POLL_SECONDS] * 9)  # the backlog, 2 a page
    assert gaps[-1] == pytest.approx(1.0)  # caught up
    assert len(consumer.read()) == 20


def test_throttling_backs_the_shard_off_and_loses_nothing() -> None:
    """ProvisionedThroughputExceeded twice: the waits grow (0.5 s, 1 s with the mid jitter
    of 0.75), then the read goes on where it was."""
    clock = Clock()
    kinesis = ScriptedKinesis(
        [Shard("s", ["m1", "m2", "m3"])],
        clock,
        errors={
            1: "ProvisionedThroughputExceededException",
            2: "ProvisionedThroughputExceededException",
        },
    )
    consumer = RecordingConsumer()
    read = reader(kinesis, consumer)
    read.run(lambda b: None, until_idle_seconds=4)
    times = [t for t, _, _ in kinesis.calls]
    assert times[2] - times[1] == pytest.approx(0.5 * 0.75)
    assert times[3] - times[2] == pytest.approx(1.0 * 0.75)
    assert consumer.read() == ["m1", "m2", "m3"]
    assert read.progress.throttles == 2


def test_an_expired_iterator_resumes_after_the_last_record_read() -> None:
    """No record is read twice or skipped."""
    clock = Clock()
    kinesis = ScriptedKinesis(
        [Shard("s", ["m1", "m2", "m3"])], clock, errors={1: "ExpiredIteratorException"}
    )
    consumer = RecordingConsumer()
    reader(kinesis, consumer).run(lambda b: None, until_idle_seconds=3)
    assert consumer.read() == ["m1", "m2", "m3"]
    assert kinesis.iterator_requests[-1]["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert kinesis.iterator_requests[-1]["StartingSequenceNumber"] == "s-1"


def test_at_timestamp_passes_the_time() -> None:
    clock = Clock()
    kinesis = ScriptedKinesis([Shard("s", ["old", "new"])], clock)
    consumer = RecordingConsumer()
    at = dt.datetime(2026, 3, 1, 9, 30)
    reader(kinesis, consumer, start=StartPosition.at(at)).run(lambda b: None, until_idle_seconds=2)
    assert consumer.read() == ["new"]
    request = kinesis.iterator_requests[0]
    assert request["ShardIteratorType"] == AT_TIMESTAMP
    assert request["Timestamp"] == at.replace(tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("ResourceNotFoundException", "the Kinesis stream 'sink' does not exist"),
        ("AccessDeniedException", "cannot read the Kinesis stream 'sink': AccessDeniedException"),
    ],
)
def test_other_errors_end_the_read_as_source_errors(code: str, message: str) -> None:
    clock = Clock()
    kinesis = ScriptedKinesis([Shard("s", ["m1"])], clock, errors={0: code})
    with pytest.raises(SourceError, match=message) as raised:
        reader(kinesis, RecordingConsumer()).run(lambda b: None, until_idle_seconds=2)
    assert raised.value.code == code


def test_no_credentials_is_a_source_error_saying_so() -> None:
    clock = Clock()
    kinesis = ScriptedKinesis([Shard("s", [])], clock)

    def refuse(**kwargs: Any) -> Any:
        raise NoCredentialsError

    kinesis.list_shards = refuse  # type: ignore[method-assign]
    with pytest.raises(SourceError, match="no AWS credentials") as raised:
        reader(kinesis, RecordingConsumer()).run(lambda b: None, until_idle_seconds=1)
    assert raised.value.code == "NoCredentials"


def test_until_idle_ends_that_long_after_the_last_record() -> None:
    clock = Clock()
    kinesis = ScriptedKinesis([Shard("s", ["m1"])], clock)
    reader(kinesis, RecordingConsumer()).run(lambda b: None, until_idle_seconds=2.5)
    assert clock.now == pytest.approx(2.5)


def test_a_read_until_caught_up_ends_when_every_shard_was_read_to_its_end() -> None:
    """Every shard read to its end (or finished) ends the read at once, waiting for no idle
    time: what a checker reads after the writers stopped."""
    clock = Clock()
    kinesis = ScriptedKinesis(
        [Shard("a", ["a1", "a2"]), Shard("b", ["b1"]), Shard("old", ["o1"], closed=True)], clock
    )
    consumer = RecordingConsumer()
    reader(kinesis, consumer).run(lambda batch: None, until_caught_up=True)
    assert sorted(consumer.read()) == ["a1", "a2", "b1", "o1"]
    assert clock.now < 2.0
