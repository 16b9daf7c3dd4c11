"""The consumer's state: one store write per commit at most, none for a batch that moved
nothing; a consumer restarted from its checkpoint re-emits nothing; a child shard carries on
from its parents; the compact encoding round-trips; a racing or stale commit is refused."""

from __future__ import annotations

import zlib

import pytest
from consumer_support import SHARD, aggregated, json_seq, numbered, one_each, seqs
from hypothesis import given
from hypothesis import strategies as st

from streamlease.consumer import (
    Consumer,
    MemoryWatermarks,
    ShardWatermarks,
    Watermark,
    WatermarkConflict,
)
from streamlease.consumer.codec import COMPRESSED, FORMAT, decode_marks, encode_marks


def test_a_commit_writes_the_shards_watermarks_once() -> None:
    store = MemoryWatermarks()
    consumer = Consumer(store)
    batch = consumer.process(SHARD, one_each(json_seq(f"s{i}", 1, 1) for i in range(50)))
    assert store.writes == 0, "process writes nothing"
    consumer.commit(batch)
    assert store.writes == 1
    stored = store.load(SHARD)
    assert stored is not None and stored.version == 1
    assert len(stored.marks) == 50 and stored.sequence_number == batch.sequence_number


def test_a_batch_that_emitted_nothing_and_moved_nothing_writes_nothing() -> None:
    store = MemoryWatermarks()
    consumer = Consumer(store)
    consumer.commit(consumer.process(SHARD, one_each([json_seq("s", 2, 1), json_seq("s", 2, 2)])))
    repeats_and_stale = consumer.process(
        SHARD, one_each([json_seq("s", 2, 2), json_seq("s", 1, 3)])
    )
    consumer.commit(repeats_and_stale)
    empty = consumer.process(SHARD, [])
    consumer.commit(empty)
    assert (repeats_and_stale.messages, repeats_and_stale.moved) == ([], False)
    assert store.writes == 1


def test_a_later_commit_covers_the_batches_before_it_and_an_earlier_one_is_then_a_no_op() -> None:
    store = MemoryWatermarks()
    consumer = Consumer(store)
    first = consumer.process(SHARD, one_each([json_seq("s", 1, 1)]))
    second = consumer.process(SHARD, [])
    consumer.commit(second)
    consumer.commit(first)
    assert store.writes == 1
    assert store.load(SHARD).marks == {"s": (1, 1)}  # type: ignore[union-attr]


def test_a_consumer_restarted_from_its_checkpoint_re_emits_nothing() -> None:
    """The first consumer committed after seq 3; Kinesis hands the new one the same records
    again (its own checkpoint lagged) and then new ones: only the new ones come out."""
    store = MemoryWatermarks()
    records = one_each(json_seq("a", 1, s) for s in (1, 2, 3))
    records += one_each(numbered("b", 4, s) for s in (1, 2))
    first = Consumer(store)
    first.commit(first.process(SHARD, records))
    later = one_each([json_seq("a", 1, 4), numbered("b", 4, 3)])
    restarted = Consumer(store)
    restarted.open_shard(SHARD)
    batch = restarted.process(SHARD, records + later)
    assert seqs(batch.messages) == [("a", 1, 4), ("b", 4, 3)]
    assert restarted.counts["a"].repeats == 3 and restarted.counts["b"].repeats == 2
    assert restarted.checkpoint(SHARD) == records[-1].sequence_number


def test_a_child_shard_inherits_its_parents_watermarks() -> None:
    """A merge of two shards: each parent is read to its end and committed, then the child
    opens with both as parents and drops what they emitted already."""
    store = MemoryWatermarks()
    consumer = Consumer(store)
    consumer.commit(consumer.process("p1", one_each([json_seq("a", 1, 5)], "p1")))
    consumer.commit(consumer.process("p2", one_each([json_seq("b", 3, 9)], "p2")))
    consumer.open_shard("child", parents=["p1", "p2"])
    batch = consumer.process(
        "child",
        one_each([json_seq("a", 1, 5), json_seq("b", 2, 10), json_seq("b", 3, 10)], "child"),
    )
    assert seqs(batch.messages) == [("b", 3, 10)]
    consumer.commit(batch)
    child = store.load("child")
    assert child is not None and child.marks == {"a": (1, 5), "b": (3, 10)}


def test_a_stream_in_both_parents_keeps_its_later_mark() -> None:
    """A split child inherited 'a' from its parent; the sibling carried 'a' on. Their merge
    keeps the sibling's (newer epoch) mark."""
    store = MemoryWatermarks()
    store.save(ShardWatermarks("left", 1, {"a": Watermark(1, 50)}))
    store.save(ShardWatermarks("right", 1, {"a": Watermark(2, 7)}))
    consumer = Consumer(store)
    consumer.open_shard("merged", parents=["left", "right"])
    assert consumer.watermarks("merged") == {"a": (2, 7)}


def test_an_opened_child_with_state_of_its_own_ignores_its_parents() -> None:
    store = MemoryWatermarks()
    store.save(ShardWatermarks("parent", 1, {"a": Watermark(1, 50)}))
    store.save(ShardWatermarks("child", 1, {"a": Watermark(1, 80)}))
    consumer = Consumer(store)
    consumer.open_shard("child", parents=["parent"])
    assert consumer.watermarks("child") == {"a": (1, 80)}


def test_two_consumers_racing_on_one_shard_cannot_both_commit() -> None:
    store = MemoryWatermarks()
    one, two = Consumer(store), Consumer(store)
    batch_one = one.process(SHARD, one_each([json_seq("s", 1, 1)]))
    batch_two = two.process(SHARD, one_each([json_seq("s", 1, 1)]))
    one.commit(batch_one)
    with pytest.raises(WatermarkConflict) as lost:
        two.commit(batch_two)
    assert (lost.value.expected, lost.value.found) == (0, 1)
    # The loser re-opens, processes again, and now finds the seq emitted.
    two.open_shard(SHARD)
    again = two.process(SHARD, one_each([json_seq("s", 1, 1), json_seq("s", 1, 2)]))
    two.commit(again)
    assert [m.seq for m in again.messages] == [2]
    assert store.load(SHARD).version == 2  # type: ignore[union-attr]


def test_re_opening_forgets_uncommitted_batches_and_refuses_their_commit() -> None:
    """A retried Lambda invocation: the batch was processed, its emit failed, nothing was
    committed; re-opening reloads the shard so the retry emits the messages again."""
    consumer = Consumer(MemoryWatermarks())
    records = one_each([json_seq("s", 1, 1)])
    failed = consumer.process(SHARD, records)
    consumer.open_shard(SHARD)
    retry = consumer.process(SHARD, records)
    assert [m.seq for m in retry.messages] == [1]
    with pytest.raises(ValueError, match="earlier opening"):
        consumer.commit(failed)


marks = st.dictionaries(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40),
    st.builds(Watermark, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
    max_size=50,
)


@given(marks)
def test_watermarks_round_trip_through_their_encoding(value: dict[str, Watermark]) -> None:
    assert decode_marks(encode_marks(value)) == value


def test_the_encoding_front_codes_and_compresses_ids_of_one_deployment() -> None:
    """1,000 ids like the cost bench's, seqs of a month at 10 msg/s: 8 bytes or so a stream
    front-coded, under 3 compressed; a single stream is not worth compressing."""
    value = {f"c10-{i:05d}": Watermark(3, 26_000_000 + i) for i in range(1000)}
    encoded = encode_marks(value)
    assert encoded[0] == COMPRESSED and len(encoded) < 3 * 1000
    assert decode_marks(encoded) == value
    assert encode_marks({"s": Watermark(1, 1)})[0] == FORMAT


def test_a_corrupt_encoding_is_refused() -> None:
    small = encode_marks({"meeting:1": Watermark(1, 2), "meeting:2": Watermark(1, 3)})
    large = encode_marks({f"meeting:{i}": Watermark(1, i) for i in range(100)})
    assert (small[0], large[0]) == (FORMAT, COMPRESSED)
    for bad in (
        b"",
        b"\x03" + small[1:],
        small[:-1],
        small[:1] + b"\x09\x01a\x01\x01",  # shares 9 bytes with no previous id
        large[:-3],
        large[:1] + b"not zlib",
        bytes([COMPRESSED]) + zlib.compress(b"\x00" * 30_000_000),
    ):
        with pytest.raises(ValueError):
            decode_marks(bad)


def test_the_aggregated_batch_of_many_streams_is_one_write() -> None:
    store = MemoryWatermarks()
    consumer = Consumer(store)
    batch = consumer.process(SHARD, [aggregated(json_seq(f"s{i}", 1, 1) for i in range(300))])
    consumer.commit(batch)
    assert len(batch.messages) == 300 and store.writes == 1
