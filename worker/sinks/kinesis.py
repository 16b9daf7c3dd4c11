"""Kinesis Data Streams sink (the AWS default): records from every stream share PutRecords calls.

Batches of every stream gather in the shared buffer (:class:`~worker.sinks.base.BufferedSink`:
group commit — while one store is under way the next gathers, and a store that is not full
waits :data:`~worker.sinks.base.LINGER_SECONDS` for more, as Kafka's ``linger.ms`` and the
KPL's buffering do: a call costs the worker about a millisecond of CPU whatever it carries).
A store sends them in ``PutRecords`` calls of at most 500 records and 5 MiB, retries only the
records Kinesis reports as failed, with backoff, and fails a batch with :class:`SinkError` once
one of its records used ``sink_max_attempts``.

A batch's records are put into a call only while its holder's fencing deadline has not passed,
so neither a first attempt nor a retry is sent after it (the client has no botocore retries of
its own). A batch cut short fails with :class:`SinkDeadlinePassed`, and both errors name the
records that were not stored, so the holder never acknowledges them and a later retry repeats
nothing that landed. Each batch is one stream's records under one header: what KPL aggregation
(many user records in one Kinesis record) would pack together.
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

if TYPE_CHECKING:
    from types_boto3_kinesis import KinesisClient
    from types_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

MAX_BATCH_RECORDS: Final = 500
MAX_BATCH_BYTES: Final = 5 * 1024 * 1024
MAX_RECORD_BYTES: Final = 1024 * 1024
"""Kinesis limits: per PutRecords call, and per record (data plus partition key)."""
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


class _Entry:
    """One record on its way, and the batch it belongs to."""

    __slots__ = ("attempts", "batch", "data", "key", "record", "size", "stored")

    def __init__(self, batch: _Batch, record: SinkRecord, data: bytes) -> None:
        self.batch = batch
        self.record = record
        self.data = data
        self.key = batch.key
        self.size = len(data) + len(batch.key.encode())
        self.attempts = 0
        self.stored = False


class _Batch:
    """One submitted batch during a store: its entries and how it ended (None: not yet)."""

    __slots__ = ("entries", "key", "outcome", "source", "unstored")

    def __init__(self, source: SinkBatch) -> None:
        self.source = source
        self.key = partition_key(source.header.stream_id)
        self.entries: list[_Entry] = []
        self.unstored = 0
        self.outcome: SinkError | None = None

    @property
    def settled(self) -> bool:
        return self.outcome is not None or self.unstored == 0

    def fail(self, message: str, *, deadline: bool = False) -> None:
        if self.settled:
            return
        unsent = [entry.record for entry in self.entries if not entry.stored]
        error = SinkDeadlinePassed if deadline else SinkError
        self.outcome = error(message, unsent=unsent)


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
        super().__init__(linger_seconds=linger_seconds, flush_records=MAX_BATCH_RECORDS)
        self.stream_name = settings.kinesis_stream_name
        self.max_attempts = settings.sink_max_attempts
        self.records = 0
        self.calls = 0
        self._client = (
            client if client is not None else aws.client("kinesis", settings, max_attempts=1)
        )
        self._backoff = (backoff_base_seconds, backoff_max_seconds)
        self._rand = rand
        self._clock = clock

    async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        """Send ``batches`` (see the module docstring); one outcome per batch."""
        taken = [_Batch(source) for source in batches]
        pending: deque[_Entry] = deque()
        for batch in taken:
            header = batch.source.header
            batch.entries = [
                _Entry(batch, record, encode_record(header, record))
                for record in batch.source.records
            ]
            batch.unstored = len(batch.entries)
            if any(entry.size > MAX_RECORD_BYTES for entry in batch.entries):
                batch.fail(f"a record is larger than the Kinesis limit of {MAX_RECORD_BYTES} bytes")
                continue
            pending.extend(batch.entries)
        while pending:
            await self._send(self._take_call(pending, DeadlineClock(self._clock)), pending)
        return [batch.outcome for batch in taken]

    def _take_call(self, pending: deque[_Entry], clock: DeadlineClock) -> list[_Entry]:
        call: list[_Entry] = []
        size = 0
        while pending and len(call) < MAX_BATCH_RECORDS:
            entry = pending[0]
            batch = entry.batch
            if batch.outcome is not None:  # failed: send nothing more of it
                pending.popleft()
                continue
            if not clock.open(batch.source.deadline):
                pending.popleft()
                batch.fail("fencing deadline passed before the records were sent", deadline=True)
                # Its records already taken into this call are not sent either: the batch
                # reported them unsent, and its holder sends them again once it may.
                size -= sum(e.size for e in call if e.batch is batch)
                call = [e for e in call if e.batch is not batch]
                continue
            if call and size + entry.size > MAX_BATCH_BYTES:
                break
            call.append(pending.popleft())
            size += entry.size
        return call

    async def _send(self, call: list[_Entry], pending: deque[_Entry]) -> None:
        if not call:
            return
        request: list[PutRecordsRequestEntryTypeDef] = [
            {"Data": entry.data, "PartitionKey": entry.key} for entry in call
        ]
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
            for entry, result in zip(call, response["Records"], strict=True):
                if "ErrorCode" in result:
                    failed.append(entry)
                    reason = str(result["ErrorCode"])
                else:
                    self.records += 1
                    entry.stored = True
                    entry.batch.unstored -= 1
        if failed:
            await self._retry_later(failed, reason, pending)

    async def _retry_later(self, failed: list[_Entry], reason: str, pending: deque[_Entry]) -> None:
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
