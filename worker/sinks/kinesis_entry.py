"""One message of the Kinesis sink on its way to a ``PutRecords`` call, and the batch it came in.

Shared by the sink (:mod:`worker.sinks.kinesis`), which makes and settles them, and the packer
(:mod:`worker.sinks.kinesis_batch`), which puts them into records.
"""

from __future__ import annotations

from streamlease.errors import SinkDeadlinePassed, SinkError
from worker.sinks.base import SinkBatch, SinkRecord


class PendingBatch:
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
        self,
        batch: PendingBatch,
        record: SinkRecord,
        data: bytes,
        key: str,
        hashed: int,
        producer: str,
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
