"""The reader's guarantee (architecture §4, "Fencing"), case by case: records built with the
worker's own encoders go through a Consumer on an in-memory store, and what comes out is each
stream's messages once, in order, from the newest epoch seen."""

from __future__ import annotations

from consumer_support import (
    Message,
    aggregated,
    json_seq,
    numbered,
    one_each,
    plain,
    seqs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlease.consumer import Consumer, MemoryWatermarks, StreamCounts
from streamlease.consumer.consumer import ProcessedBatch
from streamlease.kinesis_records import seq_from_upstream
from streamlease.kpl import hash_key

SHARD = "shardId-000000000000"


def run(*messages: Message, raw: bool = False) -> tuple[ProcessedBatch, Consumer]:
    consumer = Consumer(MemoryWatermarks(), raw=raw)
    return consumer.process(SHARD, one_each(messages)), consumer


def test_the_seq_is_the_upstreams_exactly_when_the_payload_is_json() -> None:
    assert seq_from_upstream("json")
    assert not seq_from_upstream("text")
    assert not seq_from_upstream("base64")


def test_a_message_of_an_older_epoch_than_one_seen_is_stale_and_dropped() -> None:
    batch, consumer = run(json_seq("s", 5, 1), json_seq("s", 6, 2), json_seq("s", 5, 3))
    assert seqs(batch.messages) == [("s", 5, 1), ("s", 6, 2)]
    assert consumer.counts["s"] == StreamCounts(messages=2, stale=1)


def test_an_upstream_seq_at_or_below_the_watermark_is_a_repeat_under_any_epoch() -> None:
    """A takeover resumes from an older checkpoint: its first seqs were emitted already."""
    batch, consumer = run(*(json_seq("s", 1, n) for n in (1, 2, 3)), json_seq("s", 2, 2))
    assert seqs(batch.messages) == [("s", 1, 1), ("s", 1, 2), ("s", 1, 3)]
    assert consumer.counts["s"] == StreamCounts(messages=3, repeats=1)


def test_a_newer_epochs_repeat_still_fences_the_older_epoch() -> None:
    """The new holder's first record is a repeat; the old holder's late seq 4 is then stale
    (the new holder delivers seq 4 itself)."""
    batch, consumer = run(
        json_seq("s", 1, 1), json_seq("s", 1, 2), json_seq("s", 2, 2), json_seq("s", 1, 3)
    )
    assert seqs(batch.messages) == [("s", 1, 1), ("s", 1, 2)]
    assert consumer.counts["s"] == StreamCounts(messages=2, repeats=1, stale=1)


def test_a_gap_is_counted_with_its_missing_seqs_and_the_message_still_emitted() -> None:
    batch, consumer = run(json_seq("s", 1, 1), json_seq("s", 1, 5), json_seq("s", 1, 7))
    assert [m.seq for m in batch.messages] == [1, 5, 7]
    assert consumer.counts["s"] == StreamCounts(messages=3, gaps=2, missing=4)


def test_the_first_message_of_a_stream_never_seen_is_no_gap() -> None:
    _, consumer = run(json_seq("s", 3, 1000))
    assert consumer.counts["s"] == StreamCounts(messages=1)


def test_a_worker_numbered_repeat_within_one_epoch_is_dropped() -> None:
    batch, consumer = run(numbered("n", 1, 1), numbered("n", 1, 2), numbered("n", 1, 2))
    assert seqs(batch.messages) == [("n", 1, 1), ("n", 1, 2)]
    assert consumer.counts["n"] == StreamCounts(messages=2, repeats=1)


def test_a_new_epoch_of_a_worker_numbered_stream_restarts_from_its_checkpoint() -> None:
    """The old holder numbered 1..5, its checkpoint said 3: the new holder numbers the next
    frames 4, 5, 6: all emitted (the reader cannot know their content repeats), and the two
    numbers used again are counted as renumbered, apart from repeats."""
    batch, consumer = run(
        *(numbered("n", 1, s) for s in range(1, 6)),
        *(numbered("n", 2, s, f"new {s}") for s in (4, 5, 6)),
        numbered("n", 1, 6),  # the old holder, late
    )
    assert [(m.epoch, m.seq) for m in batch.messages] == [
        *((1, s) for s in range(1, 6)),
        (2, 4),
        (2, 5),
        (2, 6),
    ]
    assert consumer.counts["n"] == StreamCounts(messages=8, stale=1, restarts=1, renumbered=2)


def test_a_new_epoch_of_a_worker_numbered_stream_may_skip_numbers() -> None:
    _, consumer = run(numbered("n", 1, 1), numbered("n", 1, 2), numbered("n", 2, 6))
    assert consumer.counts["n"] == StreamCounts(messages=3, restarts=1, skipped=3)


def test_interleaved_streams_of_one_shard_keep_their_own_order_and_watermarks() -> None:
    record = aggregated(
        [
            json_seq("a", 1, 1),
            numbered("b", 7, 10),
            json_seq("a", 1, 2),
            numbered("b", 7, 11),
            json_seq("a", 1, 2),
            json_seq("c", 2, 9),
        ]
    )
    consumer = Consumer(MemoryWatermarks())
    batch = consumer.process(SHARD, [record, plain(json_seq("a", 1, 3))])
    assert seqs(batch.messages) == [
        ("a", 1, 1),
        ("b", 7, 10),
        ("a", 1, 2),
        ("b", 7, 11),
        ("c", 2, 9),
        ("a", 1, 3),
    ]
    assert consumer.counts["a"] == StreamCounts(messages=3, repeats=1)
    assert dict(consumer.watermarks(SHARD)) == {"a": (1, 3), "b": (7, 11), "c": (2, 9)}


def test_an_emitted_message_keeps_its_fields_and_where_it_was_read() -> None:
    record = aggregated([Message("s", 4, 9, b"\x00\xff", "base64", 123)])
    batch = Consumer(MemoryWatermarks()).process(SHARD, [record])
    (m,) = batch.messages
    assert m == (
        "s",
        4,
        9,
        123,
        b"\x00\xff",
        "base64",
        "task-1/7-ab12",
        SHARD,
        record.sequence_number,
        record.arrival_ms,
    )
    assert m.to_json() == {
        "stream_id": "s",
        "epoch": 4,
        "seq": 9,
        "received_at_ms": 123,
        "payload": "AP8=",
        "payload_encoding": "base64",
    }


def test_to_json_puts_a_json_payload_inline_and_text_as_a_string() -> None:
    batch, _ = run(Message("s", 1, 1, b'{"a":[1,"\xc3\xa9"]}'), numbered("t", 1, 1, "hé"))
    assert batch.messages[0].to_json()["payload"] == {"a": [1, "é"]}
    assert batch.messages[1].to_json()["payload"] == "hé"


def test_raw_mode_filters_nothing_but_counts_as_the_rule_would() -> None:
    batch, consumer = run(
        json_seq("s", 2, 1), json_seq("s", 2, 1), json_seq("s", 1, 2), json_seq("s", 2, 4),
        raw=True,
    )  # fmt: skip
    assert [(m.epoch, m.seq) for m in batch.messages] == [(2, 1), (2, 1), (1, 2), (2, 4)]
    assert consumer.counts["s"] == StreamCounts(messages=2, repeats=1, stale=1, gaps=1, missing=2)


# --- the property: a kill -9 failover, replayed in any order Kinesis could show it -----------


@st.composite
def failovers(draw: st.DrawFn) -> tuple[int, int, int, list[Message]]:
    """Epoch e delivers 1..n; epoch e+1 resumes from a checkpoint k ≤ n and delivers k+1..m
    (m ≥ n: it carries on past where e stopped);
    records of epoch e (a frozen holder's late appends, retried writes) and repeated records
    of e+1 land late, each anywhere after its original."""
    e = draw(st.integers(1, 2**40))
    n = draw(st.integers(1, 12))
    k = draw(st.integers(0, n))
    m = draw(st.integers(max(n, k + 1), n + 15))
    order = [json_seq("s", e, s) for s in range(1, n + 1)]
    order += [json_seq("s", e + 1, s) for s in range(k + 1, m + 1)]
    late = draw(st.lists(st.tuples(st.booleans(), st.integers(1, n)), max_size=20))
    for old_epoch, seq in late:
        message = json_seq("s", e, seq) if old_epoch else json_seq("s", e + 1, min(m, k + seq))
        first = order.index(message)  # its first delivery
        order.insert(draw(st.integers(first + 1, len(order))), message)
    return e, k, m, order


@settings(max_examples=300, deadline=None)
@given(failovers(), st.integers(1, 6))
def test_a_failover_replayed_in_any_order_emits_each_seq_once_in_order(
    case: tuple[int, int, int, list[Message]], batch_size: int
) -> None:
    _, _, m, order = case
    consumer = Consumer(MemoryWatermarks())
    emitted = []
    for start in range(0, len(order), batch_size):
        batch = consumer.process(SHARD, [aggregated(order[start : start + batch_size])])
        consumer.commit(batch)
        emitted += [message.seq for message in batch.messages]
    assert emitted == list(range(1, m + 1))
    counts = consumer.counts["s"]
    assert counts.messages == m
    assert counts.messages + counts.repeats + counts.stale == len(order)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_worker_numbered_failover_shows_both_holdings_and_counts_what_was_numbered_again(
    data: st.DataObject,
) -> None:
    """A ``seq: none`` feed: epoch e numbered 1..n, epoch e+1 numbers on from a checkpoint
    k ≤ n. Both holdings come out whole and in order (the reader cannot tell that n − k of
    the new numbers name content already emitted; it counts them), late records of e never."""
    n = data.draw(st.integers(1, 10))
    k = data.draw(st.integers(0, n))
    m = data.draw(st.integers(k + 1, k + 12))
    order = [numbered("n", 1, s) for s in range(1, n + 1)]
    order += [numbered("n", 2, s, f"new {s}") for s in range(k + 1, m + 1)]
    for seq in data.draw(st.lists(st.integers(1, n), max_size=10)):
        message = numbered("n", 1, seq)
        first = order.index(message)
        order.insert(data.draw(st.integers(max(first + 1, n + 1), len(order))), message)
    consumer = Consumer(MemoryWatermarks())
    batch = consumer.process(SHARD, one_each(order))
    assert [(m.epoch, m.seq) for m in batch.messages] == [
        *((1, s) for s in range(1, n + 1)),
        *((2, s) for s in range(k + 1, m + 1)),
    ]
    counts = consumer.counts["n"]
    assert (counts.restarts, counts.renumbered, counts.skipped) == (1, n - k, 0)
    assert counts.stale == len(order) - (n + m - k)


def test_after_a_reshard_a_shard_leaves_out_the_messages_of_streams_it_does_not_cover() -> None:
    """An aggregate packed for the parent lands on the child that covers its first message's
    stream; the sink writes the other streams' messages again on their own child. Each child,
    given its hash key range, keeps only its own streams (the KCL's rule), so every message is
    emitted once although both children inherit the parent's watermarks."""
    low, high = sorted((hash_key("x"), hash_key("y")))
    split = (low + high) // 2
    ranges = {"left": (0, split - 1), "right": (split, 2**128 - 1)}
    first, second = ("x", "y") if hash_key("x") < split else ("y", "x")
    store = MemoryWatermarks()
    parent = Consumer(store)
    parent.commit(
        parent.process(
            "parent", [aggregated([json_seq(first, 1, 1), json_seq(second, 1, 1)], "parent")]
        )
    )
    consumer = Consumer(store)
    consumer.open_shard("left", ["parent"], ranges["left"])
    consumer.open_shard("right", ["parent"], ranges["right"])
    landed = aggregated([json_seq(first, 1, 2), json_seq(second, 1, 2)], "left")
    again = aggregated([json_seq(second, 1, 2), json_seq(second, 1, 3)], "right")
    emitted = (
        consumer.process("left", [landed]).messages + consumer.process("right", [again]).messages
    )
    assert sorted(seqs(emitted)) == sorted([(first, 1, 2), (second, 1, 2), (second, 1, 3)])
    assert consumer.counts[second].misrouted == 1
    assert consumer.counts[second].repeats == 0
