"""The walk for streams of gone sessions against the moto server: a turn covers as many entries
as before, in small pages each done with before the next (what a worker parses at once stays
bounded whatever its capacity), reads each owner once, and frees only a gone owner's streams."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, cast

import pytest
from stream_items import SESSION_HELD_MS, Handoffs, put_stream

from streamlease.lease_store import LeaseStore
from streamlease.model import LeaseView
from worker.liveness.gone_sessions import PAGE_ITEMS, GoneSessions
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

    def held_through_sessions(
        self, *, limit: int, start: Mapping[str, Any] | None = None
    ) -> tuple[list[LeaseView], Mapping[str, Any] | None]:
        page, cursor = self._store.held_through_sessions(limit=limit, start=start)
        self.pages.append((limit, len(page)))
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


def walker(store: LeaseStore, capacity: int) -> tuple[GoneSessions, CountingStore, Sessions]:
    counting, sessions = CountingStore(store), Sessions()
    ctx = SimpleNamespace(
        worker_id=SELF,
        store=counting,
        sessions=sessions,
        settings=SimpleNamespace(capacity=capacity, handoff_on_release=True),
        handoffs=Handoffs(),
    )
    return (
        GoneSessions(cast(Any, ctx), cast(Any, SimpleNamespace(live_workers=1))),
        counting,
        sessions,
    )


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
    """Capacity 100: a turn covers 250 entries (the whole fleet here) as before, but no Scan
    request asks for (or returns) more than a page; each other owner is read once; only the
    gone session's streams are freed, and handed off."""
    gone_sessions, counting, sessions = walker(store, capacity=100)
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
