"""Where a consumer keeps its watermarks between runs: the store interface, the in-memory
store, and the rule a child shard inherits its parents' watermarks by (pure but for the
in-memory store's lock).

One shard's watermarks are one record (:class:`ShardWatermarks`): every stream seen in the
shard, written whole by each commit, so the cost of the state grows with batches, never with
messages. Each write names the version it follows (``version − 1``; 0: none stored yet) and
lands only if the store is still there: two consumers racing on one shard cannot both win,
and a stale consumer cannot move watermarks back (:class:`~streamlease.errors
.WatermarkConflict`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from streamlease.consumer.codec import Watermark
from streamlease.errors import WatermarkConflict


@dataclass(frozen=True)
class ShardWatermarks:
    """One shard's stored state: its version (1 for the first write), the watermark of every
    stream seen in it, and the Kinesis sequence number of the last record the writing batch
    read (None: not known)."""

    shard_id: str
    version: int
    marks: Mapping[str, Watermark] = field(default_factory=dict)
    sequence_number: str | None = None


class WatermarkStore(Protocol):
    """Where watermarks live. Both operations are one request each."""

    def load(self, shard_id: str) -> ShardWatermarks | None:
        """The shard's watermarks as last written (a strongly consistent read), or None when
        none were. Raises :class:`~streamlease.errors.StoreError` when the store does not
        answer."""
        ...

    def save(self, state: ShardWatermarks) -> None:
        """Write ``state`` if the stored version is ``state.version − 1`` (none stored, for
        version 1). Raises :class:`~streamlease.errors.WatermarkConflict` when it is not,
        :class:`~streamlease.errors.StoreError` when the store does not answer (the write may
        have landed)."""
        ...


class MemoryWatermarks:
    """A :class:`WatermarkStore` in this process's memory, with the same conditional writes
    (thread-safe). ``writes`` counts the writes that landed, ``refused`` those that lost."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: dict[str, ShardWatermarks] = {}
        self.writes = 0
        self.refused = 0

    def load(self, shard_id: str) -> ShardWatermarks | None:
        """The shard's watermarks as last written, or None."""
        with self._lock:
            return self._shards.get(shard_id)

    def save(self, state: ShardWatermarks) -> None:
        """Write ``state`` if the stored version is the one before it. Raises
        :class:`~streamlease.errors.WatermarkConflict` when it is not."""
        with self._lock:
            stored = self._shards.get(state.shard_id)
            found = stored.version if stored else 0
            if found != state.version - 1:
                self.refused += 1
                raise WatermarkConflict(state.shard_id, state.version - 1, found)
            self._shards[state.shard_id] = ShardWatermarks(
                state.shard_id, state.version, dict(state.marks), state.sequence_number
            )
            self.writes += 1


def inherited(parents: Iterable[ShardWatermarks | None]) -> dict[str, Watermark]:
    """The watermarks a new child shard starts from: every stream of every parent (the KCL
    rule: a parent is read to its end before its children). A stream found in two parents —
    one inherited it from a split, the other carried it on — keeps the later of its marks, by
    epoch, then seq: both only grow for a stream (within an epoch, for a worker-numbered
    seq)."""
    merged: dict[str, Watermark] = {}
    for parent in parents:
        if parent is None:
            continue
        for stream_id, mark in parent.marks.items():
            held = merged.get(stream_id)
            if held is None or mark > held:
                merged[stream_id] = mark
    return merged
