"""Kinesis Data Streams sink (the AWS default): records from every stream share PutRecords calls.

Concurrent :meth:`KinesisSink.write` calls queue their records; one flusher task sends them in
``PutRecords`` calls of at most 500 records and 5 MiB (group commit: while one call is in flight
the next batch gathers, and a batch that is not full waits :data:`LINGER_SECONDS` for more, as
Kafka's ``linger.ms`` and the KPL's buffering do: a call costs the worker about a millisecond of
CPU whatever it carries), retries only the records Kinesis reports as failed, with backoff, and
fails a write with :class:`SinkError` once one of its records used ``sink_max_attempts``.

Each write carries its holder's fencing deadline: a record is put into a call only while that
deadline has not passed, so neither a first attempt nor a retry is sent after it (the client has
no botocore retries of its own). A write cut short fails with :class:`SinkDeadlinePassed`, and
both errors name the records that were not stored, so the holder never acknowledges them and a
later retry repeats nothing that landed.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from streamlease import aws
from streamlease.errors import ConfigError, SinkDeadlinePassed, SinkError
from streamlease.rules import backoff_seconds
from streamlease.settings import Settings
from worker.sinks.base import Deadline, SinkRecord, encode_record

if TYPE_CHECKING:
    from types_boto3_kinesis import KinesisClient
    from types_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

MAX_BATCH_RECORDS: Final = 500
MAX_BATCH_BYTES: Final = 5 * 1024 * 1024
MAX_RECORD_BYTES: Final = 1024 * 1024
"""Kinesis limits: per PutRecords call, and per record (data plus partition key)."""
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
        self.entries: list[_Entry] = []
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


class _Entry:
    __slots__ = ("attempts", "data", "key", "record", "size", "stored", "write")

    def __init__(self, record: SinkRecord, write: _Write) -> None:
        self.record = record
        self.data = encode_record(record)
        self.key = partition_key(record.stream_id)
        self.size = len(self.data) + len(self.key.encode())
        self.write = write
        self.attempts = 0
        self.stored = False


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
        self.records = 0
        self.calls = 0
        self._client = (
            client if client is not None else aws.client("kinesis", settings, max_attempts=1)
        )
        self._backoff = (backoff_base_seconds, backoff_max_seconds)
        self._rand = rand
        self._linger = linger_seconds
        self._pending: deque[_Entry] = deque()
        self._in_flight: list[_Entry] = []
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
        entries = [_Entry(record, write) for record in records]
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
        if flusher is not None:
            await flusher

    async def _run_flusher(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closed:
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if self._linger > 0 and len(self._pending) < MAX_BATCH_RECORDS:
                    await asyncio.sleep(self._linger)  # let the batch fill
                await self._send(self._take_batch())
        except BaseException:
            for entry in (*self._in_flight, *self._pending):
                entry.write.fail("kinesis sink stopped")
            self._pending.clear()
            raise
        finally:
            self._flusher = None

    def _take_batch(self) -> list[_Entry]:
        batch: list[_Entry] = []
        size = 0
        pending = self._pending
        while pending and len(batch) < MAX_BATCH_RECORDS:
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
            if batch and size + entry.size > MAX_BATCH_BYTES:
                break
            batch.append(pending.popleft())
            size += entry.size
        return batch

    async def _send(self, batch: list[_Entry]) -> None:
        if not batch:
            return
        self._in_flight = batch
        request: list[PutRecordsRequestEntryTypeDef] = [
            {"Data": entry.data, "PartitionKey": entry.key} for entry in batch
        ]
        self.calls += 1
        try:
            response = await asyncio.to_thread(
                self._client.put_records, StreamName=self.stream_name, Records=request
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "ClientError"))
            if code not in RETRYABLE_ERRORS:
                self._fail(batch, f"Kinesis PutRecords failed ({code})")
                return
            failed, reason = batch, code
        except BotoCoreError as exc:
            failed, reason = batch, type(exc).__name__
        else:
            failed, reason = [], ""
            for entry, result in zip(batch, response["Records"], strict=True):
                if "ErrorCode" in result:
                    failed.append(entry)
                    reason = str(result["ErrorCode"])
                else:
                    self.records += 1
                    entry.stored = True
                    entry.write.record_stored()
        finally:
            self._in_flight = []
        if failed:
            await self._retry_later(failed, reason)

    async def _retry_later(self, failed: list[_Entry], reason: str) -> None:
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

    def _fail(self, batch: list[_Entry], message: str) -> None:
        for entry in batch:
            entry.write.fail(message)
