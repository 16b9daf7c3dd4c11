"""Whole-fleet readers read the peers' load figures from their items: every live peer once a
heartbeat, a peer that just appeared at once and alone, and nothing on a failed read."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from streamlease.errors import StoreError
from streamlease.model import WorkerInfo
from streamlease.schema import WorkerState
from streamlease.session_store import WorkerLoad
from worker.liveness.peer_loads import PeerLoads

HEARTBEAT = 5.0


class Items:
    """The peers' items as the store would answer, and what was asked."""

    def __init__(self) -> None:
        self.loads: dict[str, WorkerLoad] = {}
        self.asked: list[list[str]] = []
        self.fail = False

    def read_loads(self, worker_ids: Any) -> dict[str, WorkerLoad]:
        ids = sorted(worker_ids)
        self.asked.append(ids)
        if self.fail:
            raise StoreError("throttled")
        return {w: self.loads[w] for w in ids if w in self.loads}


def worker(worker_id: str, state: WorkerState = WorkerState.RUNNING) -> WorkerInfo:
    return WorkerInfo(worker_id, state, 0, 0, 1, 10, "h", 1)


def loads_seen(book: PeerLoads, workers: list[WorkerInfo], now: float) -> dict[str, float | None]:
    merged = asyncio.run(book.with_loads(workers, "me", now))
    return {w.worker_id: w.load for w in merged}


def test_peers_are_read_once_a_heartbeat_and_a_new_one_at_once_alone() -> None:
    items = Items()
    items.loads = {"a": WorkerLoad(2_000, 100), "b": WorkerLoad(3_000, 200)}
    book = PeerLoads(cast(Any, items), HEARTBEAT)
    fleet = [worker("me"), worker("a"), worker("b")]

    assert loads_seen(book, fleet, 0.0) == {"me": None, "a": 2.0, "b": 3.0}
    items.loads["a"] = WorkerLoad(9_000, 100)
    assert loads_seen(book, fleet, 1.0)["a"] == 2.0, "within the heartbeat: as last read"
    assert items.asked == [["a", "b"]]

    items.loads["c"] = WorkerLoad(4_000, 300)
    seen = loads_seen(book, [*fleet, worker("c")], 2.0)
    assert items.asked[-1] == ["c"], "only the newcomer"
    assert seen == {"me": None, "a": 2.0, "b": 3.0, "c": 4.0}

    seen = loads_seen(book, [*fleet, worker("c")], HEARTBEAT + 0.5)
    assert items.asked[-1] == ["a", "b", "c"]
    assert seen["a"] == 9.0


def test_tombstones_are_not_read_and_a_failed_read_leaves_no_figures() -> None:
    items = Items()
    items.loads = {"a": WorkerLoad(2_000, 100)}
    book = PeerLoads(cast(Any, items), HEARTBEAT)
    fleet = [worker("a"), worker("gone", WorkerState.EXPIRED)]
    assert loads_seen(book, fleet, 0.0) == {"a": 2.0, "gone": None}
    assert items.asked == [["a"]]

    items.fail = True
    assert loads_seen(book, fleet, HEARTBEAT) == {"a": None, "gone": None}, "counts decide"
    items.fail = False
    assert loads_seen(book, fleet, HEARTBEAT + 0.1) == {"a": 2.0, "gone": None}
