"""Which orphans a reconcile round takes: released streams are left to their handoff by workers
not below their share, for one round."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any, cast

from streamlease import rules
from streamlease.errors import StoreError
from streamlease.indexes import INDEX_SHARDS
from streamlease.model import LeaseView
from streamlease.schema import Liveness
from streamlease.settings import Settings
from worker.ownership.acquisition import Outcome
from worker.ownership.fleet_view import FleetView
from worker.ownership.holdings import Holdings
from worker.ownership.reconciler import SWEEP_EVERY_ROUNDS, Reconciler, query_limit

RELEASED = LeaseView("released", None, 3, expires_at_ms=0)
"""Freed by its holder (a rebalance or a drain): its handoff command is on the way."""
EXPIRED = LeaseView("expired", "dead-worker", 2, expires_at_ms=5)
"""Its holder stopped renewing long ago: nobody will hand it over."""


class Store:
    def __init__(self, views: list[LeaseView]) -> None:
        self.views = views
        self.scans: list[tuple[int, int]] = []
        self.queries = 0
        self.left: list[LeaseView] = []
        """Free in a session fleet's shards: found by the next whole read, not by a query."""
        self.unanswered = 0
        """How many whole reads go unanswered before one is answered."""
        """Free streams in a session fleet's other shards: the next sweep finds them."""

    def expiring_before(self, bound_ms: int, *, limit: int) -> list[LeaseView]:
        self.queries += 1
        return list(self.views)

    def orphans(
        self, cutoff_ms: int, *, limit: int, segment: int = 0, segments: int = 1
    ) -> list[LeaseView]:
        self.scans.append((segment, segments))
        if self.unanswered:
            self.unanswered -= 1
            raise StoreError("no answer")
        return [v for v in self.views + self.left if v.expires_at_ms < cutoff_ms]


class Acquirer:
    def __init__(self, holdings: Holdings) -> None:
        self.holdings = holdings
        self.tried: list[str] = []

    def may_acquire(self) -> bool:
        return True

    async def try_acquire(self, stream_id: str, *, source: str) -> Outcome:
        self.tried.append(stream_id)
        self.holdings.reserve(stream_id)
        return Outcome.WON


def reconciler(
    held: int, share: int, views: list[LeaseView], live_workers: int = 3, **settings: Any
) -> tuple[Reconciler, Acquirer, Store]:
    holdings = Holdings(capacity=100, given_away_seconds=15.0)
    for n in range(held):
        holdings.reserve(f"held-{n}")
    store = Store(views)
    acquirer = Acquirer(holdings)
    ctx = SimpleNamespace(
        settings=dataclasses.replace(Settings(), **settings),
        shutdown_requested=asyncio.Event(),
        store=store,
        worker_id="me",
    )
    view = FleetView()
    view.recount(share * live_workers, live_workers)
    return Reconciler(cast(Any, ctx), cast(Any, acquirer), holdings, view), acquirer, store


async def test_a_worker_at_its_share_leaves_a_just_released_stream_to_its_handoff() -> None:
    """Taking it would be a wasted move; a stream whose holder died has no handoff coming."""
    rounds, acquirer, _ = reconciler(held=5, share=5, views=[RELEASED, EXPIRED])
    await rounds.reconcile_once()
    assert acquirer.tried == ["expired"]


async def test_a_released_stream_still_unowned_a_round_later_is_taken() -> None:
    """The share may be stale, or the handoff lost: nobody leaves it unowned for good."""
    rounds, acquirer, _ = reconciler(held=5, share=5, views=[RELEASED])
    await rounds.reconcile_once()
    assert acquirer.tried == []
    await rounds.reconcile_once()
    assert acquirer.tried == ["released"]


async def test_a_worker_below_its_share_takes_a_released_stream_at_once() -> None:
    rounds, acquirer, _ = reconciler(held=2, share=5, views=[RELEASED])
    await rounds.reconcile_once()
    assert acquirer.tried == ["released"]


async def test_without_handoffs_a_released_stream_is_taken_at_once() -> None:
    """Releases that send no handoff (the seed design) have nothing to wait for."""
    rounds, acquirer, _ = reconciler(held=5, share=5, views=[RELEASED], handoff_on_release=False)
    await rounds.reconcile_once()
    assert acquirer.tried == ["released"]


async def test_a_small_session_fleet_reads_every_orphan_in_one_scan() -> None:
    """Up to a few workers, one segment: the whole orphan index, as one query did."""
    rounds, _, store = reconciler(held=0, share=5, views=[EXPIRED], live_workers=3)
    await rounds.reconcile_once()
    assert store.scans == [(0, 1)] and store.queries == 0


async def test_a_large_session_fleet_scans_one_segment_and_counts_the_rest() -> None:
    """Each worker reads one part at random; the orphans it found stand for every part."""
    rounds, _, store = reconciler(held=0, share=5, views=[EXPIRED, RELEASED], live_workers=400)
    await rounds.reconcile_once()
    ((segment, segments),) = store.scans
    assert segments == rules.scan_segments(400, INDEX_SHARDS) > 1
    assert 0 <= segment < segments
    assert rounds._view.orphans == 2 * segments


async def test_per_stream_leases_query_their_one_shard_by_expiry() -> None:
    """Suspects need the expiry order: a query; past start-up, no scan."""
    rounds, _, store = reconciler(held=0, share=5, views=[EXPIRED], liveness=Liveness.STREAM)
    await rounds.reconcile_once()
    store.scans.clear()
    await rounds.reconcile_once()
    assert store.queries == 2 and store.scans == []


async def test_per_stream_leases_read_the_session_shards_at_start_and_every_few_rounds() -> None:
    """What a session fleet freed into its other shards is found without any command: a whole
    read at the first round, then every ``SWEEP_EVERY_ROUNDS``; no other round pays for one."""
    rounds, _, store = reconciler(held=0, share=5, views=[], liveness=Liveness.STREAM)
    for _ in range(2 * SWEEP_EVERY_ROUNDS + 1):
        await rounds.reconcile_once()
    assert len(store.scans) == 3 and store.queries == 2 * SWEEP_EVERY_ROUNDS + 1


async def test_streams_left_in_the_session_shards_are_taken_a_read_later() -> None:
    """Found there, most have their handoff command on its way: one still there a read later is
    taken like any orphan; while some are found, every round reads again."""
    rounds, acquirer, store = reconciler(held=0, share=5, views=[], liveness=Liveness.STREAM)
    store.left = [RELEASED]
    await rounds.reconcile_once()
    assert acquirer.tried == []
    await rounds.reconcile_once()
    assert acquirer.tried == ["released"]
    store.left = []
    await rounds.reconcile_once()
    await rounds.reconcile_once()
    assert len(store.scans) == 3


async def test_a_worker_at_its_share_takes_a_left_stream_too() -> None:
    """A drained session fleet's stream looks just released; no handoff is coming for it."""
    rounds, acquirer, store = reconciler(held=5, share=5, views=[], liveness=Liveness.STREAM)
    store.left = [RELEASED]
    for _ in range(3):
        await rounds.reconcile_once()
    assert acquirer.tried == ["released"]


async def test_an_unanswered_read_of_the_session_shards_costs_neither_the_round_nor_the_retry() -> (
    None
):
    """The round still takes what its own shard shows; the next round reads the index again."""
    rounds, acquirer, store = reconciler(held=0, share=5, views=[EXPIRED], liveness=Liveness.STREAM)
    store.unanswered, store.left = 1, [RELEASED]
    await rounds.reconcile_once()
    assert acquirer.tried == ["expired"]
    store.views = []
    await rounds.reconcile_once()
    await rounds.reconcile_once()
    assert len(store.scans) == 3 and acquirer.tried == ["expired", "released"]


async def test_a_query_cut_at_its_limit_does_not_make_every_round_a_whole_read() -> None:
    """More orphans in its own shard than a query returns: the whole read finds the rest, which
    are not a session fleet's leftovers; the next whole read waits its turn."""
    many = [LeaseView(f"lapsed-{n}", "dead-worker", 2, expires_at_ms=5) for n in range(300)]
    rounds, _, store = reconciler(held=0, share=5, views=[], liveness=Liveness.STREAM)
    limit = query_limit(Settings().capacity)
    store.views, store.left = many[:limit], many[limit:]
    await rounds.reconcile_once()
    await rounds.reconcile_once()
    assert len(store.scans) == 1
