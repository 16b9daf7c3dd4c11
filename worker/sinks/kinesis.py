"""Kinesis Data Streams sink (the AWS default): messages from every stream share PutRecords calls.

Concurrent :meth:`KinesisSink.write` calls queue their messages; one flusher task sends them in
``PutRecords`` calls of at most 500 records and 5 MiB (group commit: while one call is in flight
the next batch gathers, and a batch that is not full waits :data:`LINGER_SECONDS` for more, as
Kafka's ``linger.ms`` and the KPL's buffering do: a call costs the worker about a millisecond of
CPU whatever it carries), retries only the messages of records Kinesis reports as failed, with
backoff, and fails a write with :class:`SinkError` once one of its messages used
``sink_max_attempts``.

With ``kinesis_aggregation`` on (the default) the messages bound for one shard share KPL
aggregated records (:mod:`worker.sinks.kinesis_batch`, :mod:`streamlease.kinesis_records`): a
Kinesis record carries up to 50 KB of messages instead of one, each message keeping its stream id
as its own partition key. The shard map comes from ``ListShards``; a record that Kinesis stores on
another shard than the one it was packed for (the stream was resharded) stores only the messages
that shard covers: the rest are sent again, and the map is read again.

Each write carries its holder's fencing deadline: a message is taken into a call only while
that deadline has not passed, and the call itself is packed and sent from the sink's own thread
(:class:`~worker.sinks.base.SinkThread`), which looks at every deadline of the batch once more
right before ``PutRecords`` and leaves out the messages of a write whose deadline has passed.
So neither a first attempt nor a retry is sent after the deadline (the client has no botocore
retries of its own), and a call started before it ends within the client's timeout
(``Settings.sink_call_timeout_seconds``, which the fence margin must cover). A write cut short
fails with :class:`SinkDeadlinePassed`, and both errors name the records that were not stored —
only once the answer of any call carrying them is known, even if the flusher is cancelled
meanwhile — so the holder never acknowledges them and a later retry repeats nothing that
landed. An aggregated record holds messages of several writes; a write whose deadline passed
before its record was sent takes its messages out first, so none of them is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from streamlease import aws
from streamlease.errors import ConfigError, SinkDeadlinePassed, SinkError
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import hash_key
from streamlease.rules import backoff_seconds
from streamlease.settings import Settings
from worker.sinks.base import Deadline, SinkRecord, SinkThread, deadline_passed, encode_record
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
    from types_boto3_kinesis.type_defs import (
        PutRecordsOutputTypeDef,
        PutRecordsRequestEntryTypeDef,
    )

MAX_PARTITION_KEY_CHARS: Final = 256
LINGER_SECONDS: Final = 0.02
"""How long a batch that is not full waits for more records before it is sent."""
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


class _Write:
    """One ``write`` call waiting for its records."""

    __slots__ = ("deadline", "entries", "future", "remaining")

    def __init__(self, future: asyncio.Future[None], deadline: Deadline) -> None:
        self.future = future
        self.deadline = deadline
        self.entries: list[Entry] = []
        self.remaining = 0

    def record_stored(self) -> None:
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(None)

    def fail(self, message: str, *, deadline: bool = False) -> None:
        if self.future.done():
            return
        unsent = [entry.record for entry in self.entries if not entry.stored]
        error = SinkDeadlinePassed if deadline else SinkError
        self.future.set_exception(error(message, unsent=unsent))


class Entry:
    """One message waiting to be stored: its bytes (a ``StreamMessage`` when aggregated, the
    JSON line when not), its partition key and that key's hash."""

    __slots__ = ("attempts", "data", "hash_key", "key", "record", "size", "stored", "write")

    def __init__(
        self, record: SinkRecord, write: _Write, data: bytes, key: str, hashed: int
    ) -> None:
        self.record = record
        self.data = data
        self.key = key
        self.hash_key = hashed
        self.size = len(data) + len(key.encode())
        self.write = write
        self.attempts = 0
        self.stored = False

    def store(self) -> None:
        self.stored = True
        self.write.record_stored()


def _entries(records: Sequence[SinkRecord], write: _Write, aggregate: bool) -> list[Entry]:
    """The queue entries of one write; what all its records share is worked out once."""
    keys: dict[str, tuple[str, int]] = {}
    epochs: dict[int, bytes] = {}
    out = []
    for record in records:
        stream = record.stream_id
        known = keys.get(stream)
        if known is None:
            key = partition_key(stream)
            known = keys[stream] = (key, hash_key(key))
        if aggregate:
            prefix = epochs.get(record.epoch)
            if prefix is None:
                prefix = epochs[record.epoch] = epoch_prefix(record.epoch)
            data = encode_message(
                prefix, record.seq, record.received_at_ms, record.payload, record.payload_encoding
            )
        else:
            data = encode_record(record)
        out.append(Entry(record, write, data, *known))
    return out


class _Call:
    """One ``PutRecords`` attempt, as its thread did it."""

    __slots__ = ("error", "late", "overflow", "puts", "response")

    def __init__(self) -> None:
        self.puts: list[Put] = []
        self.late: list[_Write] = []
        """Writes whose deadline had passed at the last look: none of their messages was sent."""
        self.overflow: list[Entry] = []
        """Messages packed into records beyond what one call takes: for the next call."""
        self.response: PutRecordsOutputTypeDef | None = None
        self.error: ClientError | BotoCoreError | None = None


class KinesisSink:
    """Writes records to ``settings.kinesis_stream_name``, partition key = stream id.

    ``client`` defaults to ``streamlease.aws.client("kinesis", settings)``; its calls run in a
    thread. Raises :class:`ConfigError` when no stream name is configured.
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
    ) -> None:
        if not settings.kinesis_stream_name:
            raise ConfigError("the kinesis sink needs STREAMLEASE_KINESIS_STREAM_NAME")
        self.stream_name = settings.kinesis_stream_name
        self.max_attempts = settings.sink_max_attempts
        self.aggregate = settings.kinesis_aggregation
        self.records = 0
        """Kinesis records stored."""
        self.messages = 0
        """Messages stored."""
        self.calls = 0
        self._client = (
            client
            if client is not None
            else aws.client(
                "kinesis",
                settings,
                max_attempts=1,
                connect_timeout_seconds=settings.sink_call_timeout_seconds,
                read_timeout_seconds=settings.sink_call_timeout_seconds,
            )
        )
        self._thread = SinkThread("kinesis-sink")
        self._backoff = (backoff_base_seconds, backoff_max_seconds)
        self._rand = rand
        self._linger = linger_seconds
        self._pending: deque[Entry] = deque()
        self._in_flight: list[Entry] = []
        self._shards = ShardMap()
        self._shards_stale = self.aggregate
        self._wakeup = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    async def write(self, records: Sequence[SinkRecord], deadline: Deadline) -> None:
        """Store ``records`` (see :class:`~worker.sinks.base.Sink`), sending nothing once
        ``deadline`` has passed. If the caller is cancelled, its records not yet sent are
        dropped. Raises :class:`SinkError` / :class:`SinkDeadlinePassed`."""
        if self._closed:
            raise SinkError("sink is closed")
        if not records:
            return
        if deadline.remaining_seconds() <= 0:
            raise SinkDeadlinePassed("fencing deadline passed", unsent=records)
        write = _Write(asyncio.get_running_loop().create_future(), deadline)
        entries = _entries(records, write, self.aggregate)
        if any(entry.size > MAX_RECORD_BYTES for entry in entries):
            raise SinkError(
                f"a record is larger than the Kinesis limit of {MAX_RECORD_BYTES} bytes",
                unsent=records,
            )
        write.entries = entries
        write.remaining = len(entries)
        self._pending.extend(entries)
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(
                self._run_flusher(), name="kinesis sink flusher"
            )
        self._wakeup.set()
        await write.future

    async def close(self) -> None:
        """Send what was accepted, then stop. Cancelling ``close`` abandons what is left."""
        self._closed = True
        self._wakeup.set()
        flusher = self._flusher
        try:
            if flusher is not None:
                await flusher
        finally:
            self._thread.shutdown()

    async def _run_flusher(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closed:
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if self._linger > 0 and len(self._pending) < MAX_CALL_RECORDS:
                    await asyncio.sleep(self._linger)  # let the batch fill
                if self._shards_stale:
                    await self._read_shards()
                await self._send(self._take_batch())
        except BaseException:
            for entry in (*self._in_flight, *self._pending):
                entry.write.fail("kinesis sink stopped")
            self._pending.clear()
            raise
        finally:
            self._flusher = None

    def _take_batch(self) -> list[Entry]:
        batch: list[Entry] = []
        size = 0
        pending = self._pending
        # Aggregated, many messages share a record: the call's size is the bound.
        most = len(pending) if self.aggregate else MAX_CALL_RECORDS
        while pending and len(batch) < most:
            entry = pending[0]
            if entry.write.future.done():  # failed or cancelled: send nothing more of it
                pending.popleft()
                continue
            write = entry.write
            if write.deadline.remaining_seconds() <= 0:
                pending.popleft()
                write.fail("fencing deadline passed before the records were sent", deadline=True)
                # Its records already taken into this batch are not sent either: the write
                # reported them unsent, and its holder sends them again once it may.
                size -= sum(e.size for e in batch if e.write is write)
                batch = [e for e in batch if e.write is not write]
                continue
            if batch and size + entry.size > _CALL_BUDGET_BYTES:
                break
            batch.append(pending.popleft())
            size += entry.size
        return batch

    async def _send(self, batch: list[Entry]) -> None:
        if not batch:
            return
        self._in_flight = batch
        call = self._thread.run(self._put, batch, self._shards)
        try:
            done = await asyncio.shield(call)
        except asyncio.CancelledError:
            # A call under way cannot be recalled: learn what it stored before the flusher
            # reports anything unsent (what landed must not be sent again).
            with contextlib.suppress(Exception):
                self._apply(await call)
            raise
        finally:
            self._in_flight = []
        failed, reason, misrouted = self._apply(done)
        if misrouted:
            failed += await self._settle_misrouted(misrouted)
            reason = reason or "the stream was resharded"
        if failed:
            await self._retry_later(failed, reason)

    def _put(self, batch: list[Entry], shards: ShardMap) -> _Call:
        """In the sink's thread: the last look at each write's deadline, then the records of
        the writes still inside theirs, packed and sent in one call."""
        call = _Call()
        late = {entry.write for entry in batch if deadline_passed(entry.write.deadline)}
        if late:
            call.late = list(late)
            batch = [entry for entry in batch if entry.write not in late]
        puts = pack(batch, shards, self.aggregate)
        if len(puts) > MAX_CALL_RECORDS:  # more shards than a call takes: the rest go next
            call.overflow = [entry for put in puts[MAX_CALL_RECORDS:] for entry in put.entries]
            puts = puts[:MAX_CALL_RECORDS]
        call.puts = puts
        if not puts:
            return call
        request: list[PutRecordsRequestEntryTypeDef] = [_request_entry(put) for put in puts]
        try:
            call.response = self._client.put_records(StreamName=self.stream_name, Records=request)
        except (ClientError, BotoCoreError) as exc:
            call.error = exc
        return call

    def _apply(self, call: _Call) -> tuple[list[Entry], str, list[tuple[Put, str]]]:
        """A call's answer, in the event loop: late writes failed, overflow queued again, stored
        messages acknowledged; returns those worth another attempt, why they failed, and the
        records stored on another shard than packed for."""
        for write in call.late:
            write.fail("fencing deadline passed before the records were sent", deadline=True)
        self._pending.extendleft(reversed(call.overflow))
        sent = [entry for put in call.puts for entry in put.entries]
        if call.puts:
            self.calls += 1
        error = call.error
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", "ClientError"))
            if code not in RETRYABLE_ERRORS:
                self._fail(sent, f"Kinesis PutRecords failed ({code})")
                return [], code, []
            return sent, code, []
        if error is not None:
            return sent, type(error).__name__, []
        if call.response is None:
            return [], "", []
        failed: list[Entry] = []
        reason = ""
        misrouted: list[tuple[Put, str]] = []
        for put, result in zip(call.puts, call.response["Records"], strict=True):
            if "ErrorCode" in result:
                failed += put.entries
                reason = str(result["ErrorCode"])
            elif put.shard_id and result.get("ShardId", put.shard_id) != put.shard_id:
                misrouted.append((put, str(result.get("ShardId", ""))))
            else:
                self._stored(put, put.entries)
        return failed, reason, misrouted

    def _stored(self, put: Put, entries: list[Entry]) -> None:
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
                self._stored(put, landed)
            unsent += [e for e in put.entries if not e.stored]
        return unsent

    async def _read_shards(self) -> None:
        """Read the stream's shard map (``ListShards``). On failure the map is kept (an empty
        one aggregates by stream only) and read again before the next call."""
        self._shards_stale = True
        try:
            self._shards = await self._thread.run(_list_shards, self._client, self.stream_name)
        except (ClientError, BotoCoreError):
            return
        self._shards_stale = False

    async def _retry_later(self, failed: list[Entry], reason: str) -> None:
        retry = []
        for entry in failed:
            entry.attempts += 1
            if entry.attempts >= self.max_attempts:
                entry.write.fail(
                    f"Kinesis did not take a record after {entry.attempts} attempts ({reason})"
                )
            else:
                retry.append(entry)
        if not retry:
            return
        # Back in the queue first, so a flusher cancelled while sleeping still fails them.
        self._pending.extendleft(reversed(retry))
        attempt = min(entry.attempts for entry in retry) - 1
        await asyncio.sleep(backoff_seconds(attempt, *self._backoff, self._rand()))

    def _fail(self, batch: list[Entry], message: str) -> None:
        for entry in batch:
            entry.write.fail(message)


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
