"""What every sink shares: records in batches under one header, the interface, the buffer in
front of every built-in sink, the sink's own thread with the fence at the last moment, and the
one wire format of a record.

A holder hands its sink a :class:`SinkBatch` — the records one or more reads produced, behind
the :class:`BatchHeader` of its holding (stream, epoch, worker: the same for every record, so
it is built and JSON-encoded once per holding, not once per message) — with
:meth:`Sink.submit`, which never waits. The sink settles the batch later, from the event loop:
``owner.batch_stored(batch)`` once every record is stored, or ``owner.batch_failed(batch,
error)``. A batch is one stream's records in seq order; a later aggregation of them into one
Kinesis record (the KPL format) needs nothing more than what a batch carries.

:class:`BufferedSink` is the machinery the built-in sinks share: batches from every stream
gather for :data:`LINGER_SECONDS` (or until :data:`FLUSH_RECORDS` records wait) and are then
stored by one call of the sink's :meth:`BufferedSink.store`, while the next ones gather (group
commit, Kafka's ``linger.ms``): the cost of a store — a thread hop, a ``PutRecords`` call — is
shared by every stream instead of paid per message.

**The fence at the last moment** (architecture §4 "Fencing"). A holder checks its deadline
before it submits a batch, but a send can queue behind other work after that check. So each
built-in sink sends from a thread of its own (:class:`SinkThread`, never the event loop's
default pool that boto3 calls and DNS lookups share), and looks at each batch's deadline again
*in that thread, immediately before the bytes leave* (:class:`DeadlineClock`): a send not
started by the deadline is not started at all, and neither is any retry of the sink's own. What
remains is the sink's own request: a send started just before the deadline finishes (or is
abandoned by the client) within the sink's timeout, which is why that timeout must fit in the
fence margin (see ``Settings.sink_call_timeout_seconds``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final, NamedTuple, ParamSpec, Protocol, TypeVar, runtime_checkable

from streamlease.errors import SinkDeadlinePassed, SinkError
from streamlease.sink_fields import PayloadEncoding, SinkField
from worker.fencing.fence import Deadline as Deadline

try:
    import orjson

    _dumps: Callable[[str], bytes] = orjson.dumps
except ImportError:  # pragma: no cover - orjson ships in the worker image

    def _dumps(value: str) -> bytes:
        return json.dumps(value).encode()


LINGER_SECONDS: Final = 0.02
"""How long submitted batches wait for more before they are stored together."""
FLUSH_RECORDS: Final = 500
"""Records waiting that make a store start at once (one full Kinesis ``PutRecords`` call)."""


class SinkRecord(NamedTuple):
    """One delivered upstream message, as its batch carries it (the header has the rest).

    ``payload`` is the upstream frame as received: the UTF-8 bytes of one JSON document
    (``payload_encoding`` ``json``), of any text (``text``), or a binary frame's bytes
    (``base64``). ``received_at_ms``: wall-clock epoch milliseconds.
    """

    seq: int
    received_at_ms: int
    payload: bytes | bytearray
    payload_encoding: str = PayloadEncoding.JSON


class BatchHeader:
    """What every record of one holding shares: stream id, lease epoch (consumers may drop older
    epochs) and the delivering worker's id. Built once per holding."""

    __slots__ = ("_json", "epoch", "stream_id", "worker_id")

    def __init__(self, stream_id: str, epoch: int, worker_id: str) -> None:
        self.stream_id = stream_id
        self.epoch = epoch
        self.worker_id = worker_id
        self._json = b'{"%s":%s,"%s":%d,"%s":%s,' % (
            SinkField.STREAM_ID.encode(),
            _dumps(stream_id),
            SinkField.EPOCH.encode(),
            epoch,
            SinkField.WORKER_ID.encode(),
            _dumps(worker_id),
        )

    def __repr__(self) -> str:
        return f"BatchHeader({self.stream_id!r}, {self.epoch}, {self.worker_id!r})"

    @property
    def encoded(self) -> bytes:
        """The header's fields as the start of a JSON object (``{"stream_id":...,``)."""
        return self._json


_P = ParamSpec("_P")
_T = TypeVar("_T")


class SinkThread:
    """One sink's own sending thread.

    Both built-in sinks send one call at a time (the file sink appends batch after batch; the
    Kinesis sink has one PutRecords call in flight while the next batch gathers), so one thread
    is what they need, and nothing else ever queues in front of their sends.
    """

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def run(
        self, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> asyncio.Future[_T]:
        """``call(*args, **kwargs)`` in the thread, after what was submitted before; the
        returned future is the event loop's (cancelling it does not stop a call under way)."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._pool, lambda: call(*args, **kwargs))

    def shutdown(self) -> None:
        """Accept nothing more; the thread exits after what it was given."""
        self._pool.shutdown(wait=False)


class NoDeadline:
    """A deadline that never passes (tools and tests that write outside any lease)."""

    def remaining_seconds(self) -> float:
        """Always infinite."""
        return float("inf")


class _Closed:
    """A deadline that has passed for good: what a batch's deadline becomes when its holding
    gives the lease up while the batch is still in the sink (:data:`CLOSED`)."""

    __slots__ = ()

    def remaining_seconds(self) -> float:
        """Always minus infinity."""
        return -math.inf

    def __repr__(self) -> str:
        return "CLOSED"


CLOSED: Final[Deadline] = _Closed()
"""The deadline of a batch whose holding is giving its lease up: a sink that looks at
``batch.deadline`` right before it sends (as it must) sends nothing more of it."""


class BatchOwner(Protocol):
    """Who submitted a batch, and is told how it went (from the event loop)."""

    def batch_stored(self, batch: SinkBatch) -> None:
        """Every record of ``batch`` is stored."""
        ...

    def batch_failed(self, batch: SinkBatch, error: SinkError) -> None:
        """``batch`` was not (wholly) stored: ``error.unsent`` names the records that were not
        (None: unknown, treat all as unsent); :class:`SinkDeadlinePassed` when nothing was sent
        because the deadline had passed."""
        ...


class SinkBatch:
    """One stream's records in seq order, its header, its deadline, and who to tell.

    ``deadline`` may be replaced by :data:`CLOSED` while the batch is in the sink (its holding
    is giving the lease up): a sink reads the attribute at each last-moment check, never a copy
    taken earlier.
    """

    __slots__ = ("deadline", "header", "owner", "records")

    def __init__(
        self,
        header: BatchHeader,
        records: list[SinkRecord],
        deadline: Deadline,
        owner: BatchOwner,
    ) -> None:
        self.header = header
        self.records = records
        self.deadline = deadline
        self.owner = owner


@runtime_checkable
class Sink(Protocol):
    """Where delivered messages go. One sink per worker process, shared by every stream.

    :meth:`submit` takes a batch and returns at once; the sink stores its records (at least
    once, in order unless a retry reorders them: consumers order by ``(epoch, seq)``) and settles
    the batch through its owner (see :class:`BatchOwner`). Nothing may be *sent* once the batch's
    deadline has passed — not a first attempt, not a retry (a send already under way may
    finish): such a batch fails with :class:`SinkDeadlinePassed`. ``submit`` after :meth:`close`
    raises :class:`SinkError`; ``close`` settles what was accepted and releases resources.
    """

    def submit(self, batch: SinkBatch) -> None: ...

    async def close(self) -> None: ...


class BufferedSink(ABC):
    """A sink that stores the batches of every stream together (see the module docstring).

    Subclasses implement :meth:`store`. The flushing task starts with the first batch and ends
    with :meth:`close` (which stores what was accepted first).
    """

    def __init__(
        self, *, linger_seconds: float = LINGER_SECONDS, flush_records: int = FLUSH_RECORDS
    ) -> None:
        self._linger = linger_seconds
        self._flush_records = flush_records
        self._pending: list[SinkBatch] = []
        self._pending_records = 0
        self._wakeup = asyncio.Event()
        self._full = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    @abstractmethod
    async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        """Store ``batches``; one outcome per batch, in order: None (stored) or the error to
        fail it with. Nothing of a batch may be sent once its deadline has passed: check it
        right before the bytes leave (:func:`deadline_passed_error` is the error then)."""

    def submit(self, batch: SinkBatch) -> None:
        """Take ``batch`` for the next store. Raises :class:`SinkError` after :meth:`close`."""
        if self._closed:
            raise SinkError("sink is closed")
        pending = self._pending
        pending.append(batch)
        self._pending_records += len(batch.records)
        if len(pending) == 1:  # the flusher may be waiting for a first batch
            if self._flusher is None:
                self._flusher = asyncio.get_running_loop().create_task(
                    self._flush_forever(), name=f"{type(self).__name__} flusher"
                )
            self._wakeup.set()
        if self._pending_records >= self._flush_records:
            self._full.set()

    async def close(self) -> None:
        """Store what was accepted, then refuse more. Cancelling ``close`` abandons the rest
        (each batch left is failed)."""
        self._closed = True
        self._wakeup.set()
        self._full.set()
        flusher = self._flusher
        if flusher is not None:
            await flusher

    async def _flush_forever(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closed:
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if self._linger > 0 and self._pending_records < self._flush_records:
                    # A timer that sets the event, not asyncio.timeout: a linger ends by the
                    # timer far more often than by a full buffer, and a timeout ends by
                    # cancelling the task and raising (50 times a second at 20 ms).
                    full = self._full
                    full.clear()
                    timer = asyncio.get_running_loop().call_later(self._linger, full.set)
                    try:
                        await full.wait()
                    finally:
                        timer.cancel()
                batches, self._pending = self._pending, []
                self._pending_records = 0
                await self._store(batches)
        except BaseException:
            batches, self._pending = self._pending, []
            for batch in batches:
                batch.owner.batch_failed(batch, SinkError("sink stopped", unsent=batch.records))
            raise
        finally:
            self._flusher = None

    async def _store(self, due: list[SinkBatch]) -> None:
        """Store ``due`` and settle each batch (the sink checks each one's deadline itself,
        right before it sends: earlier would be a check too early)."""
        try:
            outcomes = await self.store(due)
        except Exception as exc:  # a sink's bug must not leave batches unsettled
            outcomes = [
                SinkError(f"sink failed ({type(exc).__name__})", unsent=b.records) for b in due
            ]
        except BaseException:
            _settle(due, self.stopped(due))
            raise
        _settle(due, outcomes)

    def stopped(self, due: list[SinkBatch]) -> list[SinkError | None]:
        """The outcomes of ``due`` when a store was cancelled part way; by default nothing of
        them counts as stored. A sink that knows what its calls stored says so (what landed
        must not be reported unsent: its holder would send it again)."""
        return [SinkError("sink stopped", unsent=batch.records) for batch in due]


def _settle(due: list[SinkBatch], outcomes: list[SinkError | None]) -> None:
    for batch, outcome in zip(due, outcomes, strict=True):
        if outcome is None:
            batch.owner.batch_stored(batch)
        else:
            batch.owner.batch_failed(batch, outcome)


class DeadlineClock:
    """Whether a batch may still be sent, asked right before it is: each distinct deadline is
    read once (the streams of one session share one), then only the clock is.

    Reading a deadline gives the seconds left; the instant it passes is kept and compared with
    ``time.monotonic()`` for every batch after. A deadline moves only later while its holder
    delivers, so the kept instant is never too late. One clock per store (or per thread).
    """

    __slots__ = ("_clock", "_deadline", "_passes_at")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: monotonic seconds (injectable for tests)."""
        self._clock = clock
        self._deadline: Deadline | None = None
        self._passes_at = 0.0

    def open(self, deadline: Deadline) -> bool:
        """True while ``deadline`` has not passed."""
        if deadline is not self._deadline:
            self._deadline = deadline
            self._passes_at = self._clock() + deadline.remaining_seconds()
        return self._clock() < self._passes_at


def deadline_passed_error(unsent: Sequence[SinkRecord]) -> SinkDeadlinePassed:
    """The error of a batch (or the part of one) not sent because its deadline had passed."""
    return SinkDeadlinePassed("fencing deadline passed", unsent=unsent)


class _Waiter:
    """The owner of a batch that :func:`write_batch` awaits."""

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future

    def batch_stored(self, batch: SinkBatch) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def batch_failed(self, batch: SinkBatch, error: SinkError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


async def write_batch(
    sink: Sink, header: BatchHeader, records: list[SinkRecord], deadline: Deadline
) -> None:
    """Submit one batch and wait until it is settled (tools and tests). Raises the
    :class:`SinkError` it failed with."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    sink.submit(SinkBatch(header, records, deadline, _Waiter(future)))
    await future


_FIELDS: Final = (
    f'"{SinkField.SEQ}":%d,"{SinkField.RECEIVED_AT_MS}":%d,'
    f'"{SinkField.PAYLOAD_ENCODING}":"%s","{SinkField.PAYLOAD}":%s'
).encode()
_TEMPLATE: Final = _FIELDS + b"}"
_TEMPLATE_WRITTEN: Final = _FIELDS + f',"{SinkField.WRITTEN_AT_MS}":%d}}'.encode()


def encode_record(
    header: BatchHeader, record: SinkRecord, written_at_ms: int | None = None
) -> bytes:
    """The record as one line of compact JSON (no newline): the header's fields, then the
    record's, ``payload`` embedded as JSON (a JSON document as itself, text as a JSON string,
    binary as a base64 string), and ``written_at_ms`` (:attr:`SinkField.WRITTEN_AT_MS`) when
    given.

    Raw line breaks in a JSON document can only be whitespace between tokens, so they are
    replaced by spaces: the result is always a single line.
    """
    payload = record.payload
    encoding = record.payload_encoding
    if encoding == PayloadEncoding.JSON:
        if b"\n" in payload or b"\r" in payload:
            payload = payload.replace(b"\n", b" ").replace(b"\r", b" ")
    elif encoding == PayloadEncoding.TEXT:
        payload = _dumps(payload.decode("utf-8", "replace"))
    else:
        payload = b'"' + base64.b64encode(payload) + b'"'
    fields = (
        record.seq,
        record.received_at_ms,
        encoding.encode(),
        payload,
    )
    if written_at_ms is None:
        return header.encoded + _TEMPLATE % fields
    return header.encoded + _TEMPLATE_WRITTEN % (*fields, written_at_ms)
