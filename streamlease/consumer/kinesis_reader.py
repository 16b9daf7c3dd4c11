"""Reading every shard of a Kinesis stream into a :class:`~streamlease.consumer.Consumer`.

:class:`KinesisReader` is the polling loop the ``streamlease consume`` command runs (a Lambda
consumer gets its records from an event source mapping instead). One thread, every shard:

- **Shards** come from ``ListShards``, read again every ``shard_refresh_seconds`` and at once
  when a shard ends (a reshard made children). A shard is read only once every parent it names
  is finished (read to its end) or gone from the listing (past the stream's retention): the
  KCL's rule, so a stream id's messages are read in order across a reshard. Each shard is
  opened with :meth:`Consumer.open_shard` and its parents before its first read.
- **Where to start**: shards listed at the start begin at the :class:`StartPosition` asked for
  (``TRIM_HORIZON``, ``LATEST`` or ``AT_TIMESTAMP``); shards that appear later (children of a
  reshard while reading) begin at their start, ``TRIM_HORIZON``, since every record in them is
  newer than the reader. After an expired iterator a shard resumes after its last record read.
- **Pace**: each shard is polled at most every ``busy_poll_seconds`` (0.2 s: Kinesis allows 5
  ``GetRecords`` a second per shard) while it has records or is behind, every
  ``idle_poll_seconds`` when caught up; ``ProvisionedThroughputExceededException`` (and the
  other throttles) back that shard off exponentially with jitter.
- **Batches**: each ``GetRecords`` page with records is processed as one batch, handed to the
  caller's ``on_batch``, then committed (:meth:`Consumer.commit`, one state write per batch).

``ClientError`` and botocore's own errors become :class:`~streamlease.errors.SourceError`
here; a throttle or an expired iterator is handled, never raised.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from streamlease.consumer import Consumer, ProcessedBatch, SourceRecord
from streamlease.consumer.records import HashRange, listed_shard
from streamlease.errors import SourceError

if TYPE_CHECKING:
    from types_boto3_kinesis import KinesisClient

TRIM_HORIZON: Final = "TRIM_HORIZON"
LATEST: Final = "LATEST"
AT_TIMESTAMP: Final = "AT_TIMESTAMP"
MAX_LIMIT: Final = 10_000
"""The most records one ``GetRecords`` returns."""
BUSY_POLL_SECONDS: Final = 0.2
"""A shard's pace while it has records: Kinesis allows 5 ``GetRecords`` a second per shard."""
IDLE_POLL_SECONDS: Final = 1.0
SHARD_REFRESH_SECONDS: Final = 10.0
THROTTLES: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "KMSThrottlingException",
        "ThrottlingException",
    }
)
"""Error codes that back one shard off instead of ending the read."""
EXPIRED_ITERATOR: Final = "ExpiredIteratorException"


@dataclass(frozen=True)
class StartPosition:
    """Where the shards listed at the start are read from: ``TRIM_HORIZON`` (the oldest
    record kept), ``LATEST`` (only records written from now on) or ``AT_TIMESTAMP``
    (``timestamp``, an aware datetime)."""

    kind: str = TRIM_HORIZON
    timestamp: dt.datetime | None = None

    def __post_init__(self) -> None:
        if self.kind not in (TRIM_HORIZON, LATEST, AT_TIMESTAMP):
            raise ValueError(f"unknown start position {self.kind!r}")
        if (self.kind == AT_TIMESTAMP) != (self.timestamp is not None):
            raise ValueError("AT_TIMESTAMP, and only it, needs a timestamp")

    @classmethod
    def at(cls, timestamp: dt.datetime) -> StartPosition:
        """Records written at or after ``timestamp`` (naive: UTC)."""
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=dt.UTC)
        return cls(AT_TIMESTAMP, timestamp)


@dataclass
class _Shard:
    shard_id: str
    parents: tuple[str, ...]
    hash_range: HashRange
    start: StartPosition
    iterator: str | None = None
    last_sequence: str | None = None
    opened: bool = False
    finished: bool = False
    caught_up: bool = False
    """Its last read reached the shard's newest record (``MillisBehindLatest`` 0)."""
    due: float = 0.0
    backoff: float = 0.0


@dataclass
class ReadProgress:
    """What a read has done so far: shards seen and finished, pages and records read,
    throttles met."""

    shards: int = 0
    finished_shards: int = 0
    pages: int = 0
    records: int = 0
    throttles: int = 0
    shard_ids: list[str] = field(default_factory=list)


class KinesisReader:
    """Reads every shard of ``stream_name`` into ``consumer`` (see the module docstring).

    ``clock``, ``sleep`` and ``rand`` are injectable for tests. Not thread-safe: one reader,
    one thread.
    """

    def __init__(
        self,
        kinesis: KinesisClient,
        stream_name: str,
        consumer: Consumer,
        *,
        start: StartPosition = StartPosition(),
        limit: int = MAX_LIMIT,
        busy_poll_seconds: float = BUSY_POLL_SECONDS,
        idle_poll_seconds: float = IDLE_POLL_SECONDS,
        shard_refresh_seconds: float = SHARD_REFRESH_SECONDS,
        backoff_base_seconds: float = 0.5,
        backoff_max_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be from 1 to {MAX_LIMIT}")
        if busy_poll_seconds < BUSY_POLL_SECONDS:
            raise ValueError(f"busy_poll_seconds must be at least {BUSY_POLL_SECONDS} s")
        self.kinesis = kinesis
        self.stream_name = stream_name
        self.consumer = consumer
        self.start = start
        self.limit = limit
        self.busy_poll_seconds = busy_poll_seconds
        self.idle_poll_seconds = max(idle_poll_seconds, busy_poll_seconds)
        self.shard_refresh_seconds = shard_refresh_seconds
        self.backoff_base_seconds = backoff_base_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.progress = ReadProgress()
        self._clock, self._sleep, self._rand = clock, sleep, rand
        self._shards: dict[str, _Shard] = {}
        self._listed_once = False
        self._refresh_at = 0.0

    def run(
        self,
        on_batch: Callable[[ProcessedBatch], None],
        *,
        until_idle_seconds: float | None = None,
        until_caught_up: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        """Read until ``stop`` is set, until ``until_idle_seconds`` have passed without a new
        record (None: until stopped or interrupted), or (``until_caught_up``) until the last
        read of every shard reached its newest record (the stream as it was when the read
        began, and what was written meanwhile). ``on_batch`` gets each processed batch before
        it is committed. Raises :class:`SourceError` when the stream cannot be read."""
        last_record_at = self._clock()
        while stop is None or not stop.is_set():
            now = self._clock()
            if now >= self._refresh_at:
                self._refresh()
            if until_idle_seconds is not None and now - last_record_at >= until_idle_seconds:
                return
            if until_caught_up and self._listed_once and self._caught_up():
                return
            shard = min(self._readable(), key=lambda s: s.due, default=None)
            wake = min(self._refresh_at, shard.due if shard else self._refresh_at)
            if until_idle_seconds is not None:
                wake = min(wake, last_record_at + until_idle_seconds)
            if shard is None or shard.due > now:
                self._sleep(max(wake - now, 0.0))
                continue
            if self._poll(shard, on_batch):
                last_record_at = self._clock()

    def _caught_up(self) -> bool:
        """Every shard read to its end: finished, or its last read reached its newest record."""
        return all(shard.finished or shard.caught_up for shard in self._shards.values())

    # --- shards ------------------------------------------------------------------------------

    def _readable(self) -> Iterator[_Shard]:
        """Open shards whose parents are done (finished, or no longer listed)."""
        for shard in self._shards.values():
            if shard.finished:
                continue
            parents = (self._shards.get(p) for p in shard.parents)
            if all(parent is None or parent.finished for parent in parents):
                yield shard

    def _refresh(self) -> None:
        listed = list(self._list_shards())
        start = self.start if not self._listed_once else StartPosition(TRIM_HORIZON)
        for entry in listed:
            shard_id = entry["ShardId"]
            if shard_id not in self._shards:
                parents, hash_range = listed_shard(entry)
                self._shards[shard_id] = _Shard(shard_id, parents, hash_range, start)
                self.progress.shard_ids.append(shard_id)
        # A shard gone from the listing (past retention) and finished is forgotten; its
        # children then count it as done.
        present = {entry["ShardId"] for entry in listed}
        for shard_id in [s for s, shard in self._shards.items() if s not in present]:
            if self._shards[shard_id].finished or not self._shards[shard_id].opened:
                del self._shards[shard_id]
        self.progress.shards = len(self.progress.shard_ids)
        self._listed_once = True
        self._refresh_at = self._clock() + self.shard_refresh_seconds

    def _list_shards(self) -> Iterator[Any]:
        token: str | None = None
        while True:
            if token:
                page = self._call(self.kinesis.list_shards, NextToken=token)
            else:
                page = self._call(self.kinesis.list_shards, StreamName=self.stream_name)
            yield from page.get("Shards", [])
            token = page.get("NextToken")
            if not token:
                return

    # --- reading -----------------------------------------------------------------------------

    def _poll(self, shard: _Shard, on_batch: Callable[[ProcessedBatch], None]) -> bool:
        """One ``GetRecords`` of ``shard``; True when it returned records."""
        try:
            if not shard.opened:
                self.consumer.open_shard(shard.shard_id, shard.parents, shard.hash_range)
                shard.opened = True
            if shard.iterator is None:
                shard.iterator = self._iterator(shard)
            page = self._call(
                self.kinesis.get_records, ShardIterator=shard.iterator, Limit=self.limit
            )
        except _Throttled:
            self.progress.throttles += 1
            shard.backoff = min(
                max(shard.backoff * 2, self.backoff_base_seconds), self.backoff_max_seconds
            )
            shard.due = self._clock() + shard.backoff * (0.5 + self._rand() / 2)
            return False
        except _IteratorExpired:
            shard.iterator = None
            return False
        shard.backoff = 0.0
        self.progress.pages += 1
        records = page.get("Records", [])
        if records:
            batch = self.consumer.process(
                shard.shard_id,
                [SourceRecord.from_get_records(shard.shard_id, r) for r in records],
            )
            on_batch(batch)
            self.consumer.commit(batch)
            shard.last_sequence = records[-1]["SequenceNumber"]
            self.progress.records += len(records)
        shard.iterator = page.get("NextShardIterator")
        if shard.iterator is None:  # closed by a reshard and read to its end
            shard.finished = True
            self.progress.finished_shards += 1
            self._refresh_at = self._clock()  # its children are listed now
            return bool(records)
        behind = page.get("MillisBehindLatest", 0) > 0
        shard.caught_up = not behind  # this read reached the shard's newest record
        pause = self.busy_poll_seconds if records or behind else self.idle_poll_seconds
        shard.due = self._clock() + pause
        return bool(records)

    def _iterator(self, shard: _Shard) -> str:
        args: dict[str, Any] = {"StreamName": self.stream_name, "ShardId": shard.shard_id}
        if shard.last_sequence is not None:
            args |= {
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": shard.last_sequence,
            }
        else:
            args["ShardIteratorType"] = shard.start.kind
            if shard.start.timestamp is not None:
                args["Timestamp"] = shard.start.timestamp
        return str(self._call(self.kinesis.get_shard_iterator, **args)["ShardIterator"])

    def _call(self, method: Callable[..., Any], **kwargs: Any) -> Any:
        """One Kinesis call, its errors translated: throttles and an expired iterator become
        the loop's own signals, everything else :class:`SourceError`."""
        name = self.stream_name
        try:
            return method(**kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
            if code in THROTTLES:
                raise _Throttled from None
            if code == EXPIRED_ITERATOR:
                raise _IteratorExpired from None
            if code == "ResourceNotFoundException":
                message = f"the Kinesis stream {name!r} does not exist (or has no such shard)"
            else:
                reason = exc.response.get("Error", {}).get("Message", "")
                message = f"cannot read the Kinesis stream {name!r}: {code}: {reason}"
            raise SourceError(message, code=code, stream_name=name) from None
        except NoCredentialsError:
            raise SourceError(
                f"no AWS credentials found to read the Kinesis stream {name!r}",
                code="NoCredentials",
                stream_name=name,
            ) from None
        except BotoCoreError as exc:
            raise SourceError(
                f"cannot reach Kinesis to read {name!r}: {exc}",
                code="Unreachable",
                stream_name=name,
            ) from None


class _Throttled(Exception):
    """A shard's read was throttled: back it off."""


class _IteratorExpired(Exception):
    """A shard's iterator expired: get a new one after its last record."""
