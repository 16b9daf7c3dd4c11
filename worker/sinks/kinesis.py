"""Kinesis Data Streams sink (the AWS default): messages from every stream share PutRecords calls.

Batches of every stream gather in the shared buffer (:class:`~worker.sinks.base.BufferedSink`:
group commit — while one store is under way the next gathers, and a store that is not full
waits :data:`~worker.sinks.base.LINGER_SECONDS` for more, as Kafka's ``linger.ms`` and the
KPL's buffering do: a call costs the worker about a millisecond of CPU whatever it carries).
A store sends them in ``PutRecords`` calls of at most 500 records and 5 MiB, retries only the
messages of records Kinesis reports as failed, with backoff, and fails a batch with
:class:`SinkError` once one of its messages used ``sink_max_attempts``. A stream's messages go
into one record of a call (what does not fit waits for the next call): Kinesis stores the
records of a call it takes even when an earlier one is refused, so two records of one stream
in one call could land out of order, and a reader that drops seqs at or below the last it
emitted would then lose the refused ones.

With ``kinesis_aggregation`` on (the default) the messages bound for one shard share KPL
aggregated records (:mod:`worker.sinks.kinesis_batch`, :mod:`streamlease.kinesis_records`): a
Kinesis record carries up to 50 KB of messages instead of one, each message keeping its stream id
as its own partition key. What a batch's messages share — partition key, its hash, the epoch's
field, the producer — is worked out once per batch from its header. The shard map comes from
``ListShards``; a record that Kinesis stores on another shard than the one it was packed for (the
stream was resharded) stores only the messages that shard covers: the rest are sent again, and
the map is read again.

Each batch carries its holder's fencing deadline: a message is taken into a call only while
that deadline has not passed, and the call itself is packed and sent from the sink's own thread
(:class:`~worker.sinks.base.SinkThread`), which looks at every deadline of the call once more
right before ``PutRecords`` and leaves out the messages of a batch whose deadline has passed.
So neither a first attempt nor a retry is sent after the deadline (the client has no botocore
retries of its own), and a call started before it ends within the client's timeout
(``Settings.sink_call_timeout_seconds``, which the fence margin must cover). A batch cut short
fails with :class:`SinkDeadlinePassed`, and both errors name the records that were not stored —
only once the answer of any call carrying them is known, even if the flusher is cancelled
meanwhile — so the holder never acknowledges them and a later retry repeats nothing that
landed. An aggregated record holds messages of several batches; a batch whose deadline passed
before its record was sent takes its messages out first, so none of them is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from streamlease import aws
from streamlease.errors import ConfigError, SinkError
from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import hash_key
from streamlease.rules import backoff_seconds
from streamlease.settings import Settings
from worker.sinks.base import (
    LINGER_SECONDS,
    BufferedSink,
    DeadlineClock,
    SinkBatch,
    SinkThread,
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
from worker.sinks.kinesis_entry import Entry, PendingBatch

if TYPE_CHECKING:
    from types_boto3_kinesis import KinesisClient
    from types_boto3_kinesis.type_defs import (
        PutRecordsOutputTypeDef,
        PutRecordsRequestEntryTypeDef,
    )

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


def _entries(batch: PendingBatch, aggregate: bool) -> list[Entry]:
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


class _Call:
    """One ``PutRecords`` attempt, as the sink's thread made it."""

    __slots__ = ("error", "late", "overflow", "puts", "response")

    def __init__(self) -> None:
        self.puts: list[Put] = []
        self.late: list[PendingBatch] = []
        """Batches whose deadline had passed at the last look: none of their messages was sent."""
        self.overflow: list[Entry] = []
        """Messages packed into records beyond what one call takes: for the next call."""
        self.response: PutRecordsOutputTypeDef | None = None
        self.error: ClientError | BotoCoreError | None = None


class KinesisSink(BufferedSink):
    """Writes records to ``settings.kinesis_stream_name``, partition key = stream id.

    ``client`` defaults to ``streamlease.aws.client("kinesis", settings)`` with one attempt per
    call and ``settings.sink_call_timeout_seconds``; its calls run in the sink's own thread.
    ``rand`` (uniform in [0, 1)) and ``clock`` (monotonic seconds) are injectable for tests.
    Raises :class:`ConfigError` when no stream name is configured.
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
        self._taken: list[PendingBatch] = []
        self._backoff = (backoff_base_seconds, backoff_max_seconds)
        self._rand = rand
        self._clock = clock
        self._shards = ShardMap()
        self._shards_stale = self.aggregate

    async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        """Send ``batches`` (see the module docstring); one outcome per batch."""
        taken = self._taken = [PendingBatch(source) for source in batches]
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
        self._taken = []
        return [batch.outcome for batch in taken]

    def stopped(self, due: list[SinkBatch]) -> list[SinkError | None]:
        """A cancelled store: what its calls stored counts as stored, the rest is unsent."""
        taken, self._taken = self._taken, []
        if [batch.source for batch in taken] != due:
            return super().stopped(due)
        for batch in taken:
            batch.fail("sink stopped")
        return [batch.outcome for batch in taken]

    async def close(self) -> None:
        """Store what was accepted, then refuse more (see :meth:`BufferedSink.close`)."""
        try:
            await super().close()
        finally:
            self._thread.shutdown()

    def _take_call(self, pending: deque[Entry], clock: DeadlineClock) -> list[Entry]:
        call: list[Entry] = []
        size = 0
        # Aggregated, many messages share a record: the call's size is the bound. A record a
        # message: one message of each stream per call (see ``pack``), so later messages of a
        # stream already in the call are passed over, for a while, to fill it with others.
        most = len(pending) if self.aggregate else MAX_CALL_RECORDS
        keys: set[str] | None = None if self.aggregate else set()
        passed: list[Entry] = []
        while pending and len(call) < most and len(passed) < _PASS_OVER_ENTRIES:
            entry = pending[0]
            batch = entry.batch
            if batch.outcome is not None:  # failed: send nothing more of it
                pending.popleft()
                continue
            if keys is not None and entry.key in keys:
                passed.append(pending.popleft())
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
            if keys is not None:
                keys.add(entry.key)
        pending.extendleft(reversed(passed))
        return call

    async def _send(self, call: list[Entry], pending: deque[Entry]) -> None:
        if not call:
            return
        sending = self._thread.run(self._put, call, self._shards)
        try:
            done = await asyncio.shield(sending)
        except asyncio.CancelledError:
            # A call under way cannot be recalled: learn what it stored before the store
            # reports anything unsent (what landed must not be sent again).
            with contextlib.suppress(Exception):
                self._apply(await sending, pending)
            raise
        failed, reason, misrouted = self._apply(done, pending)
        if misrouted:
            failed += await self._settle_misrouted(misrouted)
            reason = reason or "the stream was resharded"
        if failed:
            await self._retry_later(failed, reason, pending)

    def _put(self, call: list[Entry], shards: ShardMap) -> _Call:
        """In the sink's thread: the last look at each batch's deadline, then the messages of
        the batches still inside theirs, packed and sent in one call."""
        sent = _Call()
        clock = DeadlineClock(self._clock)
        late = {e.batch for e in call if not clock.open(e.batch.source.deadline)}
        if late:
            sent.late = list(late)
            call = [entry for entry in call if entry.batch not in late]
        puts, later = pack(call, shards, self.aggregate)
        if len(puts) > MAX_CALL_RECORDS:  # more records than a call takes: the rest go next
            later = [entry for put in puts[MAX_CALL_RECORDS:] for entry in put.entries] + later
            puts = puts[:MAX_CALL_RECORDS]
        if later:  # back to the queue in the order they came (a stream's order is its seqs')
            position = {id(entry): n for n, entry in enumerate(call)}
            sent.overflow = sorted(later, key=lambda entry: position[id(entry)])
        sent.puts = puts
        if not puts:
            return sent
        request: list[PutRecordsRequestEntryTypeDef] = [_request_entry(put) for put in puts]
        try:
            sent.response = self._client.put_records(StreamName=self.stream_name, Records=request)
        except (ClientError, BotoCoreError) as exc:
            sent.error = exc
        return sent

    def _apply(
        self, sent: _Call, pending: deque[Entry]
    ) -> tuple[list[Entry], str, list[tuple[Put, str]]]:
        """A call's answer, in the event loop: late batches failed, overflow queued again,
        stored messages acknowledged; returns those worth another attempt, why they failed, and
        the records stored on another shard than packed for."""
        for batch in sent.late:
            batch.fail("fencing deadline passed before the records were sent", deadline=True)
        pending.extendleft(reversed(sent.overflow))
        entries = [entry for put in sent.puts for entry in put.entries]
        if sent.puts:
            self.calls += 1
        error = sent.error
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", "ClientError"))
            if code not in RETRYABLE_ERRORS:
                for entry in entries:
                    entry.batch.fail(f"Kinesis PutRecords failed ({code})")
                return [], code, []
            return entries, code, []
        if error is not None:
            return entries, type(error).__name__, []
        if sent.response is None:
            return [], "", []
        failed: list[Entry] = []
        reason = ""
        misrouted: list[tuple[Put, str]] = []
        for put, result in zip(sent.puts, sent.response["Records"], strict=True):
            if "ErrorCode" in result:
                failed += put.entries
                reason = str(result["ErrorCode"])
            elif put.shard_id and result.get("ShardId", put.shard_id) != put.shard_id:
                misrouted.append((put, str(result.get("ShardId", ""))))
            else:
                self._stored(put.entries)
        return failed, reason, misrouted

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
            self._shards = await self._thread.run(_list_shards, self._client, self.stream_name)
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


_PASS_OVER_ENTRIES: Final = 10 * MAX_CALL_RECORDS
"""How many later messages of streams already in a call (a record a message) one call passes
over to fill itself with other streams' messages: a bound on the work of a call."""
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
