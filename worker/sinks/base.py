"""What every sink shares: the record, the interface, the one wire format of a record, and the
fence at the last moment.

**The fence at the last moment** (architecture §4 "Fencing"). A holder checks its deadline before it
hands a batch to the sink, but a send can queue behind other work after that check. So each
built-in sink sends from a thread of its own (:class:`SinkThread`, never the event loop's default
pool that boto3 calls and DNS lookups share), and looks at the deadline again *in that thread,
immediately before the bytes leave* (:func:`deadline_passed`): a send not started by the
deadline is not started at all, and neither is any retry of the sink's own. What remains is the
sink's own request: a send started just before the deadline finishes (or is abandoned by the
client) within the sink's timeout, which is why that timeout must fit in the fence margin (see
``Settings.sink_timeout_seconds``).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final, NamedTuple, ParamSpec, Protocol, TypeVar, runtime_checkable

from streamlease.schema import PayloadEncoding, SinkField

try:
    import orjson

    _dumps: Callable[[str], bytes] = orjson.dumps
except ImportError:  # pragma: no cover - orjson ships in the worker image

    def _dumps(value: str) -> bytes:
        return json.dumps(value).encode()


class SinkRecord(NamedTuple):
    """One delivered upstream message. Field names are :class:`SinkField`'s (a test checks it).

    ``payload`` is the upstream frame as received: the UTF-8 bytes of one JSON document
    (``payload_encoding`` ``json``), of any text (``text``), or a binary frame's bytes
    (``base64``). ``epoch`` is the lease epoch under which it was delivered (consumers may drop
    older epochs).
    """

    stream_id: str
    epoch: int
    seq: int
    received_at_ms: int
    payload: bytes
    worker_id: str
    payload_encoding: str = PayloadEncoding.JSON


class Deadline(Protocol):
    """The fencing deadline of the holder whose records a sink write carries.

    Sinks ask it from their own thread, right before sending: it must be cheap and safe to call
    from any thread.
    """

    def remaining_seconds(self) -> float:
        """Seconds before the deadline (0 or less: passed). It may move later, never earlier
        while the holder still delivers."""
        ...


def deadline_passed(deadline: Deadline) -> bool:
    """True when nothing may be sent under ``deadline`` any more: the one check every built-in
    sink makes in its sending thread right before the bytes leave."""
    return deadline.remaining_seconds() <= 0


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


@runtime_checkable
class Sink(Protocol):
    """Where delivered messages go. One sink per worker process, shared by every stream.

    ``write`` returns once the records are stored (at least once) and raises
    :class:`~streamlease.errors.SinkError` when the sink gave up after its own retries; records of
    one call are stored in order unless a retry reorders them (consumers order by
    ``(epoch, seq)``). Nothing may be *sent* once ``deadline`` has passed — not a first attempt,
    not a retry (a send already under way may finish): then ``write`` raises
    :class:`~streamlease.errors.SinkDeadlinePassed`. Either error says in ``unsent`` which
    records were not stored, when the sink knows. ``close`` flushes what was accepted and
    releases resources; ``write`` after ``close`` raises ``SinkError``.
    """

    async def write(self, records: Sequence[SinkRecord], deadline: Deadline) -> None: ...

    async def close(self) -> None: ...


_FIELDS: Final = (
    f'{{"{SinkField.STREAM_ID}":%s,"{SinkField.EPOCH}":%d,"{SinkField.SEQ}":%d,'
    f'"{SinkField.RECEIVED_AT_MS}":%d,"{SinkField.WORKER_ID}":%s,'
    f'"{SinkField.PAYLOAD_ENCODING}":"%s","{SinkField.PAYLOAD}":%s'
).encode()
_TEMPLATE: Final = _FIELDS + b"}"
_TEMPLATE_WRITTEN: Final = _FIELDS + f',"{SinkField.WRITTEN_AT_MS}":%d}}'.encode()


def encode_record(record: SinkRecord, written_at_ms: int | None = None) -> bytes:
    """The record as one line of compact JSON (no newline), ``payload`` embedded as JSON (a
    JSON document as itself, text as a JSON string, binary as a base64 string), and
    ``written_at_ms`` (:attr:`SinkField.WRITTEN_AT_MS`) when given.

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
        _dumps(record.stream_id),
        record.epoch,
        record.seq,
        record.received_at_ms,
        _dumps(record.worker_id),
        encoding.encode(),
        payload,
    )
    if written_at_ms is None:
        return _TEMPLATE % fields
    return _TEMPLATE_WRITTEN % (*fields, written_at_ms)
