"""How the Kinesis sink turns queued messages into the records of one ``PutRecords`` call.

Pure: entries in, records out; no I/O. With aggregation on, the messages bound for one shard
are packed into KPL aggregated records (:mod:`streamlease.kpl`) of at most
:data:`MAX_AGGREGATED_BYTES`; each record carries an explicit hash key of its first message, so it
lands on the shard every message in it belongs to, which is what the KCL checks when it
deaggregates. With aggregation off, every message is a record of its own, routed by its partition
key.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from streamlease.kpl import Aggregator
from worker.sinks.kinesis_entry import Entry

MAX_CALL_RECORDS: Final = 500
MAX_CALL_BYTES: Final = 5 * 1024 * 1024
MAX_RECORD_BYTES: Final = 1024 * 1024
"""Kinesis limits: per PutRecords call, and per record (data plus partition key)."""
MAX_AGGREGATED_BYTES: Final = 50 * 1024
"""Largest aggregated record (the KPL's default): two 25 KB PUT payload units in provisioned
mode, and a bounded amount to resend when one record of a call is throttled."""


class ShardRange(NamedTuple):
    """One shard's hash key range (both ends included)."""

    shard_id: str
    start: int
    end: int


class ShardMap:
    """The shards of a stream by hash key: the open ones route, every one is known by id."""

    def __init__(self, shards: Iterable[tuple[ShardRange, bool]] = ()) -> None:
        """``shards``: each range, and whether the shard is open (takes writes)."""
        self.by_id: dict[str, ShardRange] = {}
        opened = []
        for shard, is_open in shards:
            self.by_id[shard.shard_id] = shard
            if is_open:
                opened.append(shard)
        opened.sort(key=lambda s: s.start)
        self._open = opened
        self._starts = [s.start for s in opened]

    def __bool__(self) -> bool:
        return bool(self._open)

    def shard_for(self, hash_key: int) -> str:
        """The open shard whose range holds ``hash_key`` ('' when none does)."""
        index = bisect.bisect_right(self._starts, hash_key) - 1
        if index < 0 or hash_key > self._open[index].end:
            return ""
        return self._open[index].shard_id

    def holds(self, shard_id: str, hash_key: int) -> bool:
        """Whether shard ``shard_id`` (open or closed) covers ``hash_key``."""
        shard = self.by_id.get(shard_id)
        return shard is not None and shard.start <= hash_key <= shard.end


class Put(NamedTuple):
    """One record of a PutRecords call and the messages it stores."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | None
    entries: list[Entry]
    shard_id: str
    """The shard it was packed for ('' when not aggregated: Kinesis routes it by key)."""


def pack(
    entries: Sequence[Entry], shards: ShardMap, aggregate: bool
) -> tuple[list[Put], list[Entry]]:
    """The records for ``entries`` (in queue order), and the entries left for the next call.

    Each stream's messages keep their order in its shard, retries included: a stream's
    messages go into **one record per call**. Kinesis stores the records of a call that it
    takes even when an earlier one of the same call is refused (throttled), so a stream spread
    over two records of one call could land out of order, and a reader that drops what is at or
    below the last seq it emitted would lose the refused messages when they come again. What
    does not fit the stream's record waits for the next call, after this one's outcome. An
    aggregated record names the worker (session) of its messages once, as its producer.
    """
    if not aggregate:  # a record a message: one message of each stream per call
        puts: list[Put] = []
        later: list[Entry] = []
        keys: set[str] = set()
        for e in entries:
            if e.key in keys:
                later.append(e)
            else:
                keys.add(e.key)
                puts.append(Put(e.data, e.key, None, [e], ""))
        return puts, later
    by_shard: dict[tuple[str, str, str], list[Entry]] = {}
    for entry in entries:
        shard_id = shards.shard_for(entry.hash_key)
        # No known shard (no map yet, or a gap in it): aggregate by stream only, which is
        # always one shard's.
        group = (shard_id, "" if shard_id else entry.key, entry.producer)
        by_shard.setdefault(group, []).append(entry)
    puts, later = [], []
    for (shard_id, _, producer), members in by_shard.items():
        aggregator = Aggregator(producer)
        taken: list[Entry] = []
        sealed: set[str] = set()
        """Streams with messages in a record of this call already filled: theirs wait."""
        for entry in members:
            if entry.key in sealed:
                later.append(entry)
                continue
            if taken and aggregator.size_with(entry.key, len(entry.data)) > MAX_AGGREGATED_BYTES:
                puts.append(_put(aggregator, taken, shard_id))
                sealed.update(e.key for e in taken)
                aggregator, taken = Aggregator(producer), []
                if entry.key in sealed:
                    later.append(entry)
                    continue
            aggregator.add(entry.key, entry.data)
            taken.append(entry)
        if taken:
            puts.append(_put(aggregator, taken, shard_id))
    return puts, later


def _put(aggregator: Aggregator, entries: list[Entry], shard_id: str) -> Put:
    first = entries[0]
    return Put(aggregator.encode(), first.key, str(first.hash_key), entries, shard_id)


def put_size(put: Put) -> int:
    """What Kinesis counts of a record against its limits: data plus partition key."""
    return len(put.data) + len(put.partition_key.encode())
