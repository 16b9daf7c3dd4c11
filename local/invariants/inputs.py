"""What the invariant checker reads: lease events and sink records, parsed from JSONL files.

Lease events come from ``Settings.lease_event_log``, in the format of
:mod:`streamlease.lease_events` (one line per acquire, renewal, fence, release, ...). Sink records
come from the file sink (one JSONL file per stream, appended in delivery order), or from the
Kinesis sink's stream, read raw and through the consumer (:func:`load_kinesis`). Parsing is
lenient: a worker killed mid-write leaves a torn last line, which is counted, not fatal.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local.jsonl_tail import read_jsonl
from streamlease import aws
from streamlease.consumer import (
    ConsumedMessage,
    Consumer,
    MemoryWatermarks,
    ReadProblem,
    StreamCounts,
)
from streamlease.consumer.kinesis_reader import BUSY_POLL_SECONDS, KinesisReader
from streamlease.lease_events import LeaseEvent
from streamlease.settings import Settings
from streamlease.sink_fields import SinkField

if TYPE_CHECKING:
    from types_boto3_kinesis import KinesisClient


@dataclass(frozen=True)
class SinkRecord:
    """One delivered message, in the order it was appended to its file."""

    stream_id: str
    epoch: int
    seq: int
    worker_id: str = ""
    received_at_ms: int = 0
    payload: Any = None
    source: str = ""
    """The file it came from; order is only meaningful within one file."""
    written_at_ms: int = 0
    """When the sink appended it (wall-clock ms; 0: the sink did not say)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "") -> SinkRecord:
        """Parse one record. Raises ``KeyError``/``ValueError``/``TypeError`` when malformed."""
        return cls(
            stream_id=str(data[SinkField.STREAM_ID]),
            epoch=int(data[SinkField.EPOCH]),
            seq=int(data[SinkField.SEQ]),
            worker_id=str(data.get(SinkField.WORKER_ID, "")),
            received_at_ms=int(data.get(SinkField.RECEIVED_AT_MS, 0)),
            payload=data.get(SinkField.PAYLOAD),
            source=source,
            written_at_ms=int(data.get(SinkField.WRITTEN_AT_MS, 0)),
        )


def _expand(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    out: list[Path] = []
    for item in items:
        path = Path(item)
        out.extend(sorted(path.rglob("*.jsonl")) if path.is_dir() else [path])
    return out


def load_events(paths: str | Path | Iterable[str | Path]) -> tuple[list[LeaseEvent], int]:
    """Lease events from JSONL files (a directory means every ``*.jsonl`` under it).

    Returns the events and the number of lines that did not parse. Missing files are empty.
    """
    return read_jsonl(_expand(paths), LeaseEvent.from_dict)


def load_records(paths: str | Path | Iterable[str | Path]) -> tuple[list[SinkRecord], int]:
    """Sink records from JSONL files (a directory: every ``*.jsonl`` under it), in file order.

    Returns the records and the number of lines that did not parse.
    """
    records: list[SinkRecord] = []
    malformed = 0
    for path in _expand(paths):
        rows, bad = read_jsonl([path], functools.partial(SinkRecord.from_dict, source=str(path)))
        records += rows
        malformed += bad
    return records, malformed


@dataclass(frozen=True)
class KinesisView:
    """The Kinesis sink stream read to its end twice: every message as stored (``raw``, each
    shard in order; ``written_at_ms`` is when Kinesis stored its record) and what the consumer
    (:mod:`streamlease.consumer`) emits of them (``emitted``), with its counts per stream and
    the records it could not read."""

    raw: list[SinkRecord]
    emitted: list[SinkRecord]
    counts: Mapping[str, StreamCounts]
    problems: list[ReadProblem]


def load_kinesis(settings: Settings, kinesis: KinesisClient | None = None) -> KinesisView:
    """Read ``settings.kinesis_stream_name`` from its start to its end (as of the read), raw
    and through the consumer, with ``kinesis`` (default: a client for ``settings``). Raises
    :class:`SourceError` when the stream cannot be read."""
    if kinesis is None:
        kinesis = aws.client("kinesis", settings)

    def read(raw: bool) -> tuple[list[SinkRecord], Consumer]:
        consumer = Consumer(MemoryWatermarks(), raw=raw)
        reader = KinesisReader(
            kinesis, settings.kinesis_stream_name, consumer, idle_poll_seconds=BUSY_POLL_SECONDS
        )
        found: list[SinkRecord] = []
        reader.run(
            lambda batch: found.extend(_from_consumed(m) for m in batch.messages),
            until_caught_up=True,
        )
        return found, consumer

    raw, _ = read(raw=True)
    emitted, consumer = read(raw=False)
    return KinesisView(raw, emitted, dict(consumer.counts), list(consumer.problems))


def _from_consumed(message: ConsumedMessage) -> SinkRecord:
    """A message the consumer read, as the checker reads a sink record (its shard is its
    ``source``: order means something within one shard)."""
    payload = message.to_json()[SinkField.PAYLOAD]
    return SinkRecord(
        stream_id=message.stream_id,
        epoch=message.epoch,
        seq=message.seq,
        worker_id=message.worker_id or "",
        received_at_ms=message.received_at_ms,
        payload=payload,
        source=message.shard_id,
        written_at_ms=message.arrival_ms or 0,
    )
