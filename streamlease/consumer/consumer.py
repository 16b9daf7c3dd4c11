"""The consumer: Kinesis records of the sink in, each stream's messages out in order, once,
with the fencing token checked (architecture §4, "Fencing"; the rule: :mod:`.rule`).

Pure core, thin shell: :meth:`Consumer.process` reads and judges a batch of one shard against
the watermarks in memory and touches no store; :meth:`Consumer.commit` writes the shard's
watermarks as of that batch, at most one write, and none when nothing moved. The caller commits
once what it emitted is safely on its way (its own sink, its own checkpoint): a crash between
the two repeats at most that batch's messages, never loses one.

Shards: :meth:`Consumer.open_shard` loads a shard's watermarks, or — for a shard never written —
its parents' (after a reshard the children carry on where the parents stopped; the KCL reads a
parent to its end before its children, and so must the caller). Calling it again reloads the
shard from the store and forgets batches processed since the last commit: what a caller does
after a :class:`~streamlease.errors.WatermarkConflict` (another consumer took the shard) or
before processing a batch again (a retried Lambda invocation).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from streamlease.consumer.codec import Watermark
from streamlease.consumer.records import (
    ConsumedMessage,
    HashRange,
    ReadProblem,
    SourceRecord,
    read_source,
)
from streamlease.consumer.rule import Verdict, judge
from streamlease.consumer.state import ShardWatermarks, WatermarkStore, inherited
from streamlease.kinesis_records import seq_from_upstream

MAX_PROBLEMS: Final = 10_000
"""Problems :attr:`Consumer.problems` keeps (the latest); :attr:`Consumer.problem_counts`
counts every one."""


class StreamCounts(NamedTuple):
    """What the consumer saw of one stream: messages emitted (by the rule, in raw mode too),
    repeats and stale-epoch messages dropped, gaps and the seqs missing in them; for a
    worker-numbered stream (``seq: none``), new epochs that restarted its numbering and the
    seqs they numbered again or left out (architecture §4: a failover of such a feed can repeat
    or skip content; the reader shows it)."""

    messages: int = 0
    repeats: int = 0
    stale: int = 0
    gaps: int = 0
    missing: int = 0
    restarts: int = 0
    renumbered: int = 0
    skipped: int = 0
    misrouted: int = 0
    """Messages left out of an aggregate stored, after a reshard, on a shard that does not
    cover their stream: the sink wrote them again where they belong (the KCL's rule)."""


def _tally(tallies: dict[str, list[int]], stream_id: str) -> list[int]:
    """The counts of ``stream_id`` in this batch (a :class:`StreamCounts` as a list)."""
    tally = tallies.get(stream_id)
    if tally is None:
        tally = tallies[stream_id] = [0] * len(StreamCounts._fields)
    return tally


def _plus(a: StreamCounts | None, b: Sequence[int]) -> StreamCounts:
    if a is None:
        return StreamCounts(*b)
    return StreamCounts(*(x + y for x, y in zip(a, b, strict=True)))


_MESSAGES, _REPEATS, _STALE, _GAPS, _MISSING, _RESTARTS, _RENUMBERED, _SKIPPED, _MISROUTED = range(
    9
)


@dataclass(frozen=True)
class ProcessedBatch:
    """One shard's batch, read and judged: the messages to emit (in order), the problems, the
    counts per stream of this batch, and the watermarks after it (for :meth:`Consumer.commit`).
    ``moved``: whether it changed any watermark."""

    shard_id: str
    messages: list[ConsumedMessage]
    problems: list[ReadProblem]
    counts: Mapping[str, StreamCounts]
    moved: bool
    marks: Mapping[str, Watermark] = field(repr=False)
    sequence_number: str | None
    index: int
    opening: int


@dataclass
class _Shard:
    """One open shard: the watermarks as processed, and what the store holds."""

    opening: int
    version: int
    """Stored version (0: none)."""
    marks: dict[str, Watermark]
    sequence_number: str | None
    committed_sequence_number: str | None
    hash_range: HashRange | None = None
    processed: int = 0
    committed: int = 0
    moved: list[int] = field(default_factory=list)
    """Indexes of the batches processed since the last commit that moved a watermark."""


class Consumer:
    """Reads the sink's Kinesis records shard by shard (see the module docstring).

    ``store``: where watermarks live (:class:`~.state.MemoryWatermarks`,
    :class:`~.dynamo_state.DynamoWatermarks`). ``raw``: emit every message read, filtering
    nothing; the rule still runs, so counts and watermarks are what a filtering consumer's
    would be. Not thread-safe: one consumer per thread (a shard's batches come one at a time).
    """

    def __init__(
        self, store: WatermarkStore, *, raw: bool = False, max_problems: int = MAX_PROBLEMS
    ) -> None:
        self._store = store
        self._raw = raw
        self._shards: dict[str, _Shard] = {}
        self._openings = 0
        self._counts: dict[str, StreamCounts] = {}
        self._problems: deque[ReadProblem] = deque(maxlen=max_problems)
        self.problem_counts: Counter[str] = Counter()
        """Problems by kind, every one since the start."""

    def open_shard(
        self, shard_id: str, parents: Sequence[str] = (), hash_range: HashRange | None = None
    ) -> None:
        """Load ``shard_id``'s watermarks from the store (one read); a shard never written
        starts from its ``parents``' (one read each: the shards it was split from or merged
        from). ``hash_range``: the shard's hash key range, from ``ListShards``; messages of an
        aggregate outside it are left out (:func:`~.records.read_source`): give it for every
        shard of a stream that may be resharded. Forgets what was processed on the shard and
        not committed. Raises :class:`~streamlease.errors.StoreError` when the store does not
        answer."""
        stored = self._store.load(shard_id)
        self._openings += 1
        if stored is not None:
            marks, version, seqno = dict(stored.marks), stored.version, stored.sequence_number
        else:
            marks, version, seqno = inherited(self._store.load(p) for p in parents), 0, None
        self._shards[shard_id] = _Shard(self._openings, version, marks, seqno, seqno, hash_range)

    def process(self, shard_id: str, records: Sequence[SourceRecord]) -> ProcessedBatch:
        """Read and judge ``records`` (the shard's next records, in order) against the
        watermarks as processed so far; writes nothing. Opens the shard (no parents) if it is
        not open. Never raises for what the records hold: what cannot be read is a
        :class:`~.records.ReadProblem` of the batch."""
        shard = self._shards.get(shard_id)
        if shard is None:
            self.open_shard(shard_id)
            shard = self._shards[shard_id]
        marks = dict(shard.marks)
        emitted: list[ConsumedMessage] = []
        problems: list[ReadProblem] = []
        tallies: dict[str, list[int]] = {}
        moved = False
        for record in records:
            found, bad, outside = read_source(record, shard.hash_range)
            problems += bad
            for stream_id in outside:
                _tally(tallies, stream_id)[_MISROUTED] += 1
            for m in found:
                before = marks.get(m.stream_id)
                verdict, mark, missing, restart, overlap, skipped = judge(
                    before, m.epoch, m.seq, seq_from_upstream(m.payload_encoding)
                )
                if mark != before:
                    marks[m.stream_id] = mark
                    moved = True
                tally = _tally(tallies, m.stream_id)
                if verdict is Verdict.EMIT:
                    tally[_MESSAGES] += 1
                    tally[_GAPS] += missing > 0
                    tally[_MISSING] += missing
                    if restart:
                        tally[_RESTARTS] += 1
                        tally[_RENUMBERED] += overlap
                        tally[_SKIPPED] += skipped
                else:
                    tally[_REPEATS if verdict is Verdict.REPEAT else _STALE] += 1
                if verdict is Verdict.EMIT or self._raw:
                    emitted.append(
                        ConsumedMessage(
                            *m,
                            shard_id=shard_id,
                            sequence_number=record.sequence_number,
                            arrival_ms=record.arrival_ms,
                        )
                    )
        shard.processed += 1
        shard.marks = marks
        if records:
            shard.sequence_number = records[-1].sequence_number
        if moved:
            shard.moved.append(shard.processed)
        counts = {stream_id: StreamCounts(*tally) for stream_id, tally in tallies.items()}
        for stream_id, tally in tallies.items():
            self._counts[stream_id] = _plus(self._counts.get(stream_id), tally)
        self._problems.extend(problems)
        self.problem_counts.update(p.kind for p in problems)
        return ProcessedBatch(
            shard_id,
            emitted,
            problems,
            counts,
            moved,
            marks,
            shard.sequence_number,
            shard.processed,
            shard.opening,
        )

    def commit(self, batch: ProcessedBatch) -> None:
        """Persist the shard's watermarks as of ``batch`` (and the batches before it): one
        conditional write if any of them moved a watermark, none otherwise, and none for a
        batch a later commit already covered. Raises
        :class:`~streamlease.errors.WatermarkConflict` when the store moved on without this
        consumer (then :meth:`open_shard` again and process the records again),
        :class:`~streamlease.errors.StoreError` when it did not answer (the write may have
        landed: commit a later batch, or re-open), and ``ValueError`` for a batch of an
        earlier opening of the shard (re-opening forgot it)."""
        shard = self._shards.get(batch.shard_id)
        if shard is None or shard.opening != batch.opening:
            raise ValueError(f"batch of an earlier opening of shard {batch.shard_id!r}")
        if batch.index <= shard.committed:
            return
        if any(index <= batch.index for index in shard.moved):
            state = ShardWatermarks(
                batch.shard_id, shard.version + 1, batch.marks, batch.sequence_number
            )
            self._store.save(state)
            shard.version = state.version
            shard.committed_sequence_number = batch.sequence_number
        shard.committed = batch.index
        shard.moved = [index for index in shard.moved if index > batch.index]

    @property
    def counts(self) -> Mapping[str, StreamCounts]:
        """Per stream, everything processed since the start (batches not committed too)."""
        return dict(self._counts)

    @property
    def problems(self) -> list[ReadProblem]:
        """The problems met since the start, oldest first (the latest ``max_problems``)."""
        return list(self._problems)

    def watermarks(self, shard_id: str) -> Mapping[str, Watermark]:
        """The shard's watermarks as processed (empty for a shard not open)."""
        shard = self._shards.get(shard_id)
        return dict(shard.marks) if shard else {}

    def checkpoint(self, shard_id: str) -> str | None:
        """The Kinesis sequence number the stored watermarks of ``shard_id`` were written
        after (None: unknown): a reader without a checkpoint of its own resumes after it. A
        batch that moved nothing is not written, so this may lag: what lies between is read
        again and dropped as repeats."""
        shard = self._shards.get(shard_id)
        return shard.committed_sequence_number if shard else None
