"""The consumer's watermarks in DynamoDB (the serialised moto server): a round trip, one write
per commit, a racing or stale commit refused, and real processes racing commits on one shard —
exactly one wins each version."""

from __future__ import annotations

import multiprocessing
import uuid
from typing import Any

import pytest
from consumer_racer import SHARD, race, record

from local.moto_process import MotoProcess
from streamlease.consumer import (
    Consumer,
    DynamoWatermarks,
    ShardWatermarks,
    Watermark,
    WatermarkConflict,
    create_watermark_table,
)
from streamlease.errors import StoreError
from streamlease.schema import WATERMARK_PK, WatermarkAttr, watermark_key


@pytest.fixture
def table(dynamodb: Any) -> str:
    name = f"wm-{uuid.uuid4().hex[:12]}"
    create_watermark_table(dynamodb, name)
    create_watermark_table(dynamodb, name)  # a second call keeps the table
    return name


def test_watermarks_round_trip_and_each_namespace_keeps_its_own(dynamodb: Any, table: str) -> None:
    store = DynamoWatermarks(dynamodb, table, "archiver/sink")
    state = ShardWatermarks(
        SHARD, 1, {"meeting:1": Watermark(3, 2**63 - 1), "é": Watermark(0, 0)}, "4960"
    )
    store.save(state)
    assert store.load(SHARD) == state
    assert DynamoWatermarks(dynamodb, table, "another-app/sink").load(SHARD) is None
    item = dynamodb.get_item(
        TableName=table, Key={WATERMARK_PK: {"S": watermark_key("archiver/sink", SHARD)}}
    )["Item"]
    assert set(item) == {WATERMARK_PK, WatermarkAttr.VERSION, WatermarkAttr.MARKS, "sn"}


def test_each_commit_that_moved_something_is_one_write(dynamodb: Any, table: str) -> None:
    store = DynamoWatermarks(dynamodb, table, "app")
    consumer = Consumer(store)
    consumer.commit(consumer.process(SHARD, [record("a", 1), record("b", 1)]))
    consumer.commit(consumer.process(SHARD, [record("a", 1)]))  # a repeat: nothing moved
    consumer.commit(consumer.process(SHARD, [record("a", 2)]))
    assert store.writes == 2
    loaded = store.load(SHARD)
    assert loaded is not None and loaded.version == 2
    assert loaded.marks == {"a": (1, 2), "b": (1, 1)}


def test_a_stale_commit_is_refused_and_moves_nothing_back(dynamodb: Any, table: str) -> None:
    """The first consumer's shard was taken over by a second, which committed further; the
    first one's late commit names a version that is gone."""
    old = Consumer(DynamoWatermarks(dynamodb, table, "app"))
    new_store = DynamoWatermarks(dynamodb, table, "app")
    new = Consumer(new_store)
    old.commit(old.process(SHARD, [record("a", 1)]))
    late = old.process(SHARD, [record("a", 2)])
    new.open_shard(SHARD)
    new.commit(new.process(SHARD, [record("a", 2), record("a", 3)]))
    with pytest.raises(WatermarkConflict) as refused:
        old.commit(late)
    assert (refused.value.expected, refused.value.found) == (1, 2)
    assert new_store.load(SHARD).marks == {"a": (1, 3)}  # type: ignore[union-attr]


def test_a_first_write_loses_to_one_that_landed_first(dynamodb: Any, table: str) -> None:
    store = DynamoWatermarks(dynamodb, table, "app")
    store.save(ShardWatermarks(SHARD, 1, {"a": Watermark(1, 1)}))
    with pytest.raises(WatermarkConflict) as refused:
        store.save(ShardWatermarks(SHARD, 1, {"a": Watermark(1, 9)}))
    assert refused.value.found == 1


def test_an_item_that_does_not_decode_is_a_store_error(dynamodb: Any, table: str) -> None:
    key = watermark_key("app", SHARD)
    dynamodb.put_item(
        TableName=table,
        Item={WATERMARK_PK: {"S": key}, "v": {"N": "1"}, "wm": {"B": b"\x07garbage"}},
    )
    with pytest.raises(StoreError, match="does not decode"):
        DynamoWatermarks(dynamodb, table, "app").load(SHARD)


@pytest.mark.slow
def test_processes_racing_commits_on_one_shard_win_each_version_exactly_once(
    moto_server: MotoProcess, table: str
) -> None:
    processes, rounds = 3, 15
    context = multiprocessing.get_context("spawn")
    go = context.Barrier(processes)
    results = context.Queue()
    racers = [
        context.Process(
            target=race, args=(moto_server.endpoint_url, table, f"c{i}", rounds, go, results)
        )
        for i in range(processes)
    ]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=120) for _ in racers]
    for racer in racers:
        racer.join(30)
        assert racer.exitcode == 0
    won = sorted(v for _, versions, _ in outcomes for v in versions)
    assert won == list(range(1, processes * rounds + 1)), "each version won exactly once"
    assert sum(conflicts for _, _, conflicts in outcomes) > 0, "the consumers never raced"
