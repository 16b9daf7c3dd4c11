"""Kinesis Data Streams sink (the AWS default): messages from every stream share PutRecords calls.

Batches of every stream gather in the shared buffer (:class:`~worker.sinks.base.BufferedSink`:
group commit — while one store is under way the next gathers, and a store that is not full
waits :data:`~worker.sinks.base.LINGER_SECONDS` for more, as Kafka's ``linger.ms`` and the
KPL's buffering do: a call costs the worker about a millisecond of CPU whatever it carries).
A store sends them in ``PutRecords`` calls of at most 500 records and 5 MiB, retries only the
messages of records Kinesis reports as failed, with backoff, and fails a batch with
:class:`SinkError` once one of its messages used ``sink_max_attempts``.

With ``kinesis_aggregation`` on (the default) the messages bound for one shard share KPL
aggregated records (:mod:`worker.sinks.kinesis_batch`, :mod:`streamlease.kinesis_records`): a
Kinesis record carries up to 50 KB of messages instead of one, each message keeping its stream id
as its own partition key. What a batch's messages share — partition key, its hash, the epoch's
field, the producer — is worked out once per batch from its header. The shard map comes from
``ListShards``; a record that Kinesis stores on another shard than the one it was packed for (the
stream was resharded) stores only the messages that shard covers: the rest are sent again, and
the map is read again.

A batch's messages are put into a call only while its holder's fencing deadline has not passed
(checked as each is taken), so neither a first attempt nor a retry is sent after it (the client
has no botocore retries of its own). A batch cut short fails with :class:`SinkDeadlinePassed`,
and both errors name the records that were not stored, so the holder never acknowledges them
and a later retry repeats nothing that landed. An aggregated record holds messages of several
batches; a batch whose deadline passed before its record was sent takes its messages out first,
so none of them is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from streamlease import aws
from streamlease.errors import ConfigError, SinkDeadlinePassed, SinkError
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import hash_key
from streamlease.rules import backoff_seconds
from streamlease.settings import Settings
from worker.sinks.base import (
    LINGER_SECONDS,
    BufferedSink,
    DeadlineClock,
    SinkBatch,
    SinkRecord,
    encode_record,
)
from worker.sinks.kinesis_batch import (
    MAX_CALL_BYTES,
    MAX_CALL_RECORDS,
    MAX_RECORD_BYTES,
    Put,
    ShardMap,
    ShardRange,
    pack,
)

if TYPE_CHECKING:
    from types_boto3_kinesis import KinesisClient
    from types_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

MAX_PARTITION_KEY_CHARS: Final = 256
RETRYABLE_ERRORS: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "ThrottlingException",
        "InternalFailure",
        "InternalFailureException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "KMSThrottlingException",
    }
)
"""Error codes of a whole failed call that are worth retrying; others fail the batch at once."""


def partition_key(stream_id: str) -> str:
    """The stream id, or its SHA-256 when longer than Kinesis allows (256 characters)."""
    if 0 < len(stream_id) <= MAX_PARTITION_KEY_CHARS:
        return stream_id
    return hashlib.sha256(stream_id.encode()).hexdigest()


class _Batch:
    """One submitted batch during a store: its messages and how it ended (None: not yet)."""

    __slots__ = ("entries", "outcome", "source", "unstored")

    def __init__(self, source: SinkBatch) -> None:
        self.source = source
        self.entries: list[Entry] = []
        self.unstored = 0
        self.outcome: SinkError | None = None

    def fail(self, message: str, *, deadline: bool = False) -> None:
        if self.outcome is not None or self.unstored == 0:
            return
        unsent = [entry.record for entry in self.entries if not entry.stored]
        error = SinkDeadlinePassed if deadline else SinkError
        self.outcome = error(message, unsent=unsent)


class Entry:
    """One message waiting to be stored: its bytes (a ``StreamMessage`` when aggregated, the
    JSON line when not), its partition key, that key's hash and its producer (the worker)."""

    __slots__ = (
        "attempts",
        "batch",
        "data",
        "hash_key",
        "key",
        "producer",
        "record",
        "size",
        "stored",
    )

    def __init__(
        self, batch: _Batch, record: SinkRecord, data: bytes, key: str, hashed: int, producer: str
    ) -> None:
        self.batch = batch
        self.record = record
        self.data = data
        self.key = key
        self.hash_key = hashed
        self.producer = producer
        self.size = len(data) + len(key.encode())
        self.attempts = 0
        self.stored = False

    def store(self) -> None:
        self.stored = True
        self.batch.unstored -= 1


def _entries(batch: _Batch, aggregate: bool) -> list[Entry]:
    """The messages of one batch, what they share worked out once from its header."""
    header = batch.source.header
    key = partition_key(header.stream_id)
    hashed = hash_key(key)
    producer = header.worker_id
    if aggregate:
        prefix = epoch_prefix(header.epoch)
        return [
            Entry(
                batch,
                r,
                encode_message(prefix, r.seq, r.received_at_ms, r.payload, r.payload_encoding),
                key,
                hashed,
                producer,
            )
            for r in batch.source.records
        ]
    return [
        Entry(batch, r, encode_record(header, r), key, hashed, producer)
        for r in batch.source.records
    ]


class KinesisSink(BufferedSink):
    """Writes records to ``settings.kinesis_stream_name``, partition key = stream id.

    ``client`` defaults to ``streamlease.aws.client("kinesis", settings)``; its calls run in a
    thread. ``rand`` (uniform in [0, 1)) and ``clock`` (monotonic seconds) are injectable for
    tests. Raises :class:`ConfigError` when no stream name is configured.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        client: KinesisClient | None = None,
        backoff_base_seconds: float = 0.1,
        backoff_max_seconds: float = 2.0,
        rand: Callable[[], float] = random.random,
        linger_seconds: float = LINGER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not settings.kinesis_stream_name:
            raise ConfigError("the kinesis sink needs STREAMLEASE_KINESIS_STREAM_NAME")
        super().__init__(linger_seconds=linger_seconds, flush_records=MAX_CALL_RECORDS)
        self.stream_name = settings.kinesis_stream_name
        self.max_attempts = settings.sink_max_attempts
        self.aggregate = settings.kinesis_aggregation
        self.records = 0
        """Kinesis records stored."""
        self.messages = 0
        """Messages stored."""
        self.calls = 0
        self._client = (
            client if client is not None else aws.client("kinesis", settings, max_attempts=1)
        )
        self._backoff = (backoff_base_seconds, backoff_max_seconds)
        self._rand = rand
        self._clock = clock
        self._shards = ShardMap()
        self._shards_stale = self.aggregate

    async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        """Send ``batches`` (see the module docstring); one outcome per batch."""
        taken = [_Batch(source) for source in batches]
        pending: deque[Entry] = deque()
        for batch in taken:
            batch.entries = _entries(batch, self.aggregate)
            batch.unstored = len(batch.entries)
            if any(entry.size > MAX_RECORD_BYTES for entry in batch.entries):
                batch.fail(f"a record is larger than the Kinesis limit of {MAX_RECORD_BYTES} bytes")
                continue
            pending.extend(batch.entries)
        while pending:
            if self._shards_stale:
                await self._read_shards()
            await self._send(self._take_call(pending, DeadlineClock(self._clock)), pending)
        return [batch.outcome for batch in taken]

    def _take_call(self, pending: deque[Entry], clock: DeadlineClock) -> list[Entry]:
        call: list[Entry] = []
        size = 0
        # Aggregated, many messages share a record: the call's size is the bound.
        most = len(pending) if self.aggregate else MAX_CALL_RECORDS
        while pending and len(call) < most:
            entry = pending[0]
            batch = entry.batch
            if batch.outcome is not None:  # failed: send nothing more of it
                pending.popleft()
                continue
            if not clock.open(batch.source.deadline):
                pending.popleft()
                batch.fail("fencing deadline passed before the records were sent", deadline=True)
                # Its messages already taken into this call are not sent either: the batch
                # reported them unsent, and its holder sends them again once it may.
                size -= sum(e.size for e in call if e.batch is batch)
                call = [e for e in call if e.batch is not batch]
                continue
            if call and size + entry.size > _CALL_BUDGET_BYTES:
                break
            call.append(pending.popleft())
            size += entry.size
        return call

    async def _send(self, call: list[Entry], pending: deque[Entry]) -> None:
        if not call:
            return
        puts = pack(call, self._shards, self.aggregate)
        if len(puts) > MAX_CALL_RECORDS:  # more shards than a call takes: the rest go next
            for put in reversed(puts[MAX_CALL_RECORDS:]):
                pending.extendleft(reversed(put.entries))
            puts = puts[:MAX_CALL_RECORDS]
            call = [entry for put in puts for entry in put.entries]
        request: list[PutRecordsRequestEntryTypeDef] = [_request_entry(put) for put in puts]
        self.calls += 1
        try:
            response = await asyncio.to_thread(
                self._client.put_records, StreamName=self.stream_name, Records=request
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "ClientError"))
            if code not in RETRYABLE_ERRORS:
                for entry in call:
                    entry.batch.fail(f"Kinesis PutRecords failed ({code})")
                return
            failed, reason = call, code
        except BotoCoreError as exc:
            failed, reason = call, type(exc).__name__
        else:
            failed, reason = [], ""
            misrouted: list[tuple[Put, str]] = []
            for put, result in zip(puts, response["Records"], strict=True):
                if "ErrorCode" in result:
                    failed += put.entries
                    reason = str(result["ErrorCode"])
                elif put.shard_id and result.get("ShardId", put.shard_id) != put.shard_id:
                    misrouted.append((put, str(result.get("ShardId", ""))))
                else:
                    self._stored(put.entries)
            if misrouted:
                failed += await self._settle_misrouted(misrouted)
                reason = reason or "the stream was resharded"
        if failed:
            await self._retry_later(failed, reason, pending)

    def _stored(self, entries: list[Entry]) -> None:
        self.records += 1
        self.messages += len(entries)
        for entry in entries:
            entry.store()

    async def _settle_misrouted(self, misrouted: list[tuple[Put, str]]) -> list[Entry]:
        """Records stored on another shard than packed for: the stream was resharded. With the
        map read again, a message counts as stored when that shard covers its key (the KCL
        keeps exactly those); the others are returned, to be sent again."""
        await self._read_shards()
        unsent = []
        for put, shard_id in misrouted:
            landed = [e for e in put.entries if self._shards.holds(shard_id, e.hash_key)]
            if landed:
                self._stored(landed)
            unsent += [e for e in put.entries if not e.stored]
        return unsent

    async def _read_shards(self) -> None:
        """Read the stream's shard map (``ListShards``). On failure the map is kept (an empty
        one aggregates by stream only) and read again before the next call."""
        self._shards_stale = True
        try:
            self._shards = await asyncio.to_thread(_list_shards, self._client, self.stream_name)
        except (ClientError, BotoCoreError):
            return
        self._shards_stale = False

    async def _retry_later(self, failed: list[Entry], reason: str, pending: deque[Entry]) -> None:
        retry = []
        for entry in failed:
            entry.attempts += 1
            if entry.attempts >= self.max_attempts:
                entry.batch.fail(
                    f"Kinesis did not take a record after {entry.attempts} attempts ({reason})"
                )
            else:
                retry.append(entry)
        if not retry:
            return
        pending.extendleft(reversed(retry))
        attempt = min(entry.attempts for entry in retry) - 1
        await asyncio.sleep(backoff_seconds(attempt, *self._backoff, self._rand()))


_CALL_BUDGET_BYTES: Final = MAX_CALL_BYTES - 512 * 1024
"""Message bytes taken into one call: below the call limit by what aggregation adds (partition
key tables, record framing)."""


def _request_entry(put: Put) -> PutRecordsRequestEntryTypeDef:
    if put.explicit_hash_key is None:
        return {"Data": put.data, "PartitionKey": put.partition_key}
    return {
        "Data": put.data,
        "PartitionKey": put.partition_key,
        "ExplicitHashKey": put.explicit_hash_key,
    }


def _list_shards(client: KinesisClient, stream_name: str) -> ShardMap:
    """Every shard of ``stream_name`` with its hash key range; open = no ending sequence."""
    shards = []
    response = client.list_shards(StreamName=stream_name)
    while True:
        for shard in response["Shards"]:
            hashes = shard["HashKeyRange"]
            shards.append(
                (
                    ShardRange(
                        shard["ShardId"],
                        int(hashes["StartingHashKey"]),
                        int(hashes["EndingHashKey"]),
                    ),
                    "EndingSequenceNumber" not in shard["SequenceNumberRange"],
                )
            )
        token = response.get("NextToken")
        if not token:
            return ShardMap(shards)
        response = client.list_shards(NextToken=token)
