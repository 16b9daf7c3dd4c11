"""The walk for streams of gone sessions against the moto server: a turn reads the fleet's
streams spread over a lease's rounds, in small pages each done with before the next (what a
worker parses at once stays bounded whatever its capacity), reads each owner once, frees only a
gone owner's streams, and reads as much as it may after a turn that freed some."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, cast

import pytest
from stream_items import SESSION_HELD_MS, Handoffs, put_stream

from streamlease.lease_store import LeaseStore
from streamlease.model import LeaseView
from worker.liveness.gone_sessions import PAGE_ITEMS, GoneSessions, turn_entries
from worker.metrics import WorkerMetrics
from worker.ownership.reconciler import query_limit

SELF = "self/1-aa"
LIVE = "live/1-bb"
GONE = "gone/1-cc"


class CountingStore:
    """The real store, with the size of every page asked for and returned noted."""

    def __init__(self, store: LeaseStore) -> None:
        self._store = store
        self.pages: list[tuple[int, int]] = []
        """(limit asked, entries returned) per Scan request."""
        self.walk_ended = False
        """Whether the last page was the walk's last."""

    def held_through_sessions(
        self, *, limit: int, start: Mapping[str, Any] | None = None
    ) -> tuple[list[LeaseView], Mapping[str, Any] | None]:
        page, cursor = self._store.held_through_sessions(limit=limit, start=start)
        self.pages.append((limit, len(page)))
        self.walk_ended = cursor is None
        return page, cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Sessions:
    """Session items: every owner but :data:`GONE` exists; reads are counted."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def read(self, worker_id: str) -> object | None:
        self.reads.append(worker_id)
        return None if worker_id == GONE else object()


def walker(
    store: LeaseStore, capacity: int, *, total_streams: int = 0, rounds_per_lease: int = 1
) -> tuple[GoneSessions, CountingStore, Sessions]:
    """The walk of this worker, of ``capacity``, in a fleet of ``total_streams`` (as the fleet
    view counts them) whose lease lasts ``rounds_per_lease`` reconcile rounds."""
    counting, sessions = CountingStore(store), Sessions()
    ctx = SimpleNamespace(
        worker_id=SELF,
        store=counting,
        sessions=sessions,
        settings=SimpleNamespace(
            capacity=capacity,
            handoff_on_release=True,
            reconcile_seconds=5.0,
            lease_seconds=5.0 * rounds_per_lease,
        ),
        handoffs=Handoffs(),
        metrics=WorkerMetrics(),
    )
    view = SimpleNamespace(live_workers=1, total_streams=total_streams)
    return GoneSessions(cast(Any, ctx), cast(Any, view)), counting, sessions


@pytest.fixture
def fleet(dynamodb: Any, aws_settings: Any) -> dict[str, str]:
    """250 session-held streams: 200 of a live session, 40 of this worker's, 10 of a gone one;
    stream id → owner."""
    owners = {f"l{n:03d}": LIVE for n in range(200)}
    owners |= {f"s{n:03d}": SELF for n in range(40)}
    owners |= {f"g{n:03d}": GONE for n in range(10)}
    for stream_id, owner in owners.items():
        put_stream(
            dynamodb,
            aws_settings.table_name,
            stream_id,
            owner=owner,
            expires_ms=SESSION_HELD_MS,
            epoch=3,
        )
    return owners


async def test_a_turn_reads_its_entries_in_small_pages_and_frees_the_gone_sessions_streams(
    store: LeaseStore, fleet: dict[str, str]
) -> None:
    """Capacity 100, a lease of one round: a turn covers 250 entries (the whole fleet here), but
    no Scan request asks for (or returns) more than a page; each other owner is read once; only
    the gone session's streams are freed, and handed off."""
    gone_sessions, counting, sessions = walker(store, capacity=100, total_streams=len(fleet))
    assert query_limit(100) == len(fleet) > PAGE_ITEMS

    freed = await gone_sessions.free_once()

    assert freed == 10
    assert sum(limit for limit, _ in counting.pages) <= query_limit(100)
    assert all(limit <= PAGE_ITEMS and found <= PAGE_ITEMS for limit, found in counting.pages)
    assert len(counting.pages) > 1
    assert sorted(sessions.reads) == [GONE, LIVE]
    gone = sorted(s for s, owner in fleet.items() if owner == GONE)
    handoffs = cast(Any, gone_sessions)._ctx.handoffs
    assert sorted(handoffs.sent) == gone
    for stream_id, owner in fleet.items():
        assert store.read(stream_id).owner == (None if owner == GONE else owner)


async def test_a_small_workers_turn_reads_no_more_than_its_share_and_the_walk_goes_on(
    store: LeaseStore, fleet: dict[str, str]
) -> None:
    """Capacity 10: a turn reads at most 70 entries; the next turns go on from the cursor and
    wrap around, so every gone session's stream is freed within a walk of the fleet."""
    gone_sessions, counting, _ = walker(store, capacity=10)
    freed = 0
    turns = -(-len(fleet) // query_limit(10))
    for _ in range(turns):
        before = len(counting.pages)
        freed += await gone_sessions.free_once()
        assert sum(limit for limit, _ in counting.pages[before:]) <= query_limit(10)

    assert freed == 10
    assert all(found <= PAGE_ITEMS for _, found in counting.pages)


async def test_a_turn_reads_the_fleet_spread_over_a_lease_and_hurries_once_it_freed_streams(
    store: LeaseStore, fleet: dict[str, str]
) -> None:
    """A lease of four rounds: a quiet turn asks for a page (250 streams / 4 rounds, at least a
    page), not the 250 this worker could; after a turn that freed streams the next asks for all
    it may (or reads to the walk's end); the gone session's streams are all freed within the
    lease's four turns."""
    gone_sessions, counting, _ = walker(
        store, capacity=100, total_streams=len(fleet), rounds_per_lease=4
    )

    async def turn() -> tuple[int, int, bool]:
        """(streams freed, entries asked for, whether the walk ended) of one turn."""
        before = len(counting.pages)
        freed = await gone_sessions.free_once()
        return freed, sum(limit for limit, _ in counting.pages[before:]), counting.walk_ended

    turns = [await turn() for _ in range(4)]

    assert sum(freed for freed, _, _ in turns) == 10
    assert turns[0][1] == PAGE_ITEMS
    for (freed_before, _, _), (_, asked, ended) in itertools.pairwise(turns):
        if freed_before:
            assert asked == query_limit(100) or ended
        else:
            assert asked <= PAGE_ITEMS
    while (await turn())[0]:  # the last hurried turns
        pass
    assert (await turn())[:2] == (0, PAGE_ITEMS)  # quiet again


@pytest.mark.parametrize(
    ("capacity", "total", "rounds", "entries"),
    [
        (1000, 1000, 4, 250),  # the fleet spread over a lease
        (1000, 50, 4, PAGE_ITEMS),  # at least a page
        (1000, 0, 4, PAGE_ITEMS),  # before the first count
        (100, 10_000, 4, 250),  # at most query_limit(capacity)
        (1000, 400, 0, 400),  # a lease shorter than a round: the whole fleet each turn
    ],
)
def test_turn_entries(capacity: int, total: int, rounds: int, entries: int) -> None:
    assert turn_entries(capacity, total, rounds) == entries
