"""The fleet watcher of a large fleet, on the moto server: each worker reads a bounded window of
the sessions after its own, one elected worker reads them all and writes the digest, and the
others take the fair share from it. The tests of who reads what and of the digest run on a
lease of a minute: nothing in them may depend on how fast the rounds go (on a loaded machine a
few rounds took longer than a lease of 0.4 s, and sessions nobody renews looked dead, or the
digest stale). The dead-session test shrinks the lease to 0.4 s and renews the rest of the
fleet as it goes."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any, cast

import pytest

from streamlease import rules
from streamlease.fleet_digest import DigestStore
from streamlease.model import WorkerInfo
from streamlease.schema import WorkerState
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from worker.liveness import fleet as fleet_module
from worker.liveness.fleet import WINDOW_PAGE, FleetWatcher
from worker.ownership.fleet_view import FleetView

LEASE_SECONDS = 0.4
"""The dead-session test's lease: a session whose hb stands still this long is dead."""
STEADY_LEASE_SECONDS = 60.0
"""Every other test's: longer than any of them runs, so no session goes stale meanwhile."""
SESSIONS = rules.FULL_READ_MAX_SESSIONS + 8
START = 1_800_000_000_000


class Takeover:
    """Records what the watcher asks of the takeover."""

    def __init__(self) -> None:
        self.taken: list[str] = []
        self.settle: Any = None

    async def take_over(self, session: WorkerInfo) -> None:
        self.taken.append(session.worker_id)

    def busy_with(self, session_id: str) -> bool:
        return False

    async def delete_if_old(self, session: WorkerInfo) -> None:
        return None


class Session:
    """This worker's own session, as the watcher sees it."""

    def __init__(self, item: WorkerInfo) -> None:
        self.item = item
        self.worker_id = item.worker_id

    def info(self) -> WorkerInfo:
        return self.item

    def healthy(self, now_mono: float | None = None) -> bool:
        return True


def item(n: int) -> WorkerInfo:
    return WorkerInfo(
        f"w{n:02d}", WorkerState.RUNNING, 0, 0, 10, 100, "h", n, started_at_ms=START + n
    )


@pytest.fixture
def fleet(sessions: SessionStore) -> list[WorkerInfo]:
    """A fleet larger than one worker reads whole, oldest first."""
    items = [item(n) for n in range(SESSIONS)]
    for i in items:
        sessions.create(i)
    return items


def watcher(
    aws_settings: Settings,
    dynamodb: Any,
    sessions: SessionStore,
    me: WorkerInfo,
    lease_seconds: float = STEADY_LEASE_SECONDS,
    my_load: float | None = None,
) -> tuple[FleetWatcher, Takeover, FleetView]:
    settings = dataclasses.replace(
        aws_settings,
        lease_seconds=lease_seconds,
        heartbeat_seconds=lease_seconds / 4,
        fence_margin_seconds=lease_seconds / 8,
        fleet_recount_seconds=lease_seconds / 8,
    )
    ctx = SimpleNamespace(
        settings=settings,
        sessions=sessions,
        worker_id=me.worker_id,
        session=Session(me),
        shutdown_requested=asyncio.Event(),
        metrics=SimpleNamespace(incr=lambda *_: None),
    )
    takeover = Takeover()
    view = FleetView()
    holdings = SimpleNamespace(
        active_count=me.active_streams,
        capacity=me.capacity,
        load=SimpleNamespace(total=lambda: my_load),
    )
    digest = DigestStore(dynamodb, settings.table_name, clock_skew_ms=settings.clock_skew_ms)
    watch = FleetWatcher(cast(Any, ctx), cast(Any, holdings), view, cast(Any, takeover), digest)
    return watch, takeover, view


def renew_all(sessions: SessionStore, fleet: list[WorkerInfo], but: set[str], beat: int) -> None:
    for w in fleet:
        if w.worker_id not in but:
            sessions.renew(
                w.worker_id, expires_at_ms=START + 10**9 + beat, now_ms=START, active_streams=10
            )


async def test_a_worker_of_a_large_fleet_reads_the_sessions_after_its_own(
    aws_settings: Settings, dynamodb: Any, sessions: SessionStore, fleet: list[WorkerInfo]
) -> None:
    """A whole read first (the fleet's size), then a window of the next few sessions."""
    watch, _, _ = watcher(aws_settings, dynamodb, sessions, fleet[3])
    async with asyncio.TaskGroup() as tasks:
        whole = await watch.refresh(tasks)
        window = await watch.refresh(tasks)
    assert len(whole) == SESSIONS
    assert [w.worker_id for w in window] == [f"w{n:02d}" for n in range(4, 4 + WINDOW_PAGE)]


async def test_the_newest_sessions_window_wraps_around_to_the_oldest(
    aws_settings: Settings, dynamodb: Any, sessions: SessionStore, fleet: list[WorkerInfo]
) -> None:
    watch, _, _ = watcher(aws_settings, dynamodb, sessions, fleet[-2])
    async with asyncio.TaskGroup() as tasks:
        await watch.refresh(tasks)
        window = await watch.refresh(tasks)
    assert [w.worker_id for w in window][:3] == [fleet[-1].worker_id, "w00", "w01"]


async def test_a_dead_session_is_tombstoned_by_a_watcher_before_it_and_by_no_other(
    aws_settings: Settings,
    dynamodb: Any,
    sessions: SessionStore,
    fleet: list[WorkerInfo],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """w05 stops renewing: w04 (whose window holds it) proves it dead after a lease and
    takes its streams; w10 (far from it) never reads it and judges nobody. Neither claims the
    fleet digest here: its writer reads the whole fleet every round and may judge anyone, so a
    random claim by w10 (a few per cent a run) would make it a reader of w05 too."""
    monkeypatch.setattr(rules, "claim_chance", lambda sessions: 0.0)
    near, near_takeover, _ = watcher(aws_settings, dynamodb, sessions, fleet[4], LEASE_SECONDS)
    far, far_takeover, _ = watcher(aws_settings, dynamodb, sessions, fleet[10], LEASE_SECONDS)
    async with asyncio.TaskGroup() as tasks:
        for beat in range(14):
            renew_all(sessions, fleet, {"w05"}, beat)
            await near.refresh(tasks)
            await far.refresh(tasks)
            await asyncio.sleep(LEASE_SECONDS / 6)
    dead = sessions.read("w05")
    assert dead is not None and dead.state is WorkerState.EXPIRED
    assert set(near_takeover.taken) == {"w05"}  # the tombstone, then sweeps of what is left
    assert far_takeover.taken == []


async def test_one_worker_writes_the_digest_and_the_others_take_the_share_from_it(
    aws_settings: Settings,
    dynamodb: Any,
    sessions: SessionStore,
    fleet: list[WorkerInfo],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No digest yet: the first reader claims it, reads every session from then on and
    publishes the counts; another worker's share is the digest's."""
    monkeypatch.setattr(fleet_module.random, "random", lambda: 0.0)  # always try to claim
    writer, _, writer_view = watcher(aws_settings, dynamodb, sessions, fleet[0])
    reader, _, reader_view = watcher(aws_settings, dynamodb, sessions, fleet[7])
    async with asyncio.TaskGroup() as tasks:
        for _ in range(fleet_module.DIGEST_READ_ROUNDS):
            await writer.refresh(tasks)
        assert writer._writer
        everyone = await writer.refresh(tasks)
        assert len(everyone) == SESSIONS, "the writer watches every session"
        for _ in range(fleet_module.DIGEST_READ_ROUNDS):
            await reader.refresh(tasks)
    digest = DigestStore(dynamodb, aws_settings.table_name).read()
    assert digest is not None and digest.writer == "w00"
    assert (digest.sessions, digest.live_workers) == (SESSIONS, SESSIONS)
    assert not reader._writer
    assert (reader_view.live_workers, reader_view.share) == (SESSIONS, 10)
    assert reader_view.share == writer_view.share


async def test_a_draining_writer_hands_the_digest_over(
    aws_settings: Settings,
    dynamodb: Any,
    sessions: SessionStore,
    fleet: list[WorkerInfo],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fleet_module.random, "random", lambda: 0.0)
    writer, _, _ = watcher(aws_settings, dynamodb, sessions, fleet[0])
    other, _, _ = watcher(aws_settings, dynamodb, sessions, fleet[1])
    async with asyncio.TaskGroup() as tasks:
        for _ in range(fleet_module.DIGEST_READ_ROUNDS):
            await writer.refresh(tasks)
        await writer.resign()
        for _ in range(fleet_module.DIGEST_READ_ROUNDS):
            await other.refresh(tasks)
    digest = DigestStore(dynamodb, aws_settings.table_name).read()
    assert digest is not None and digest.writer == "w01"


async def test_a_fleet_grown_small_again_is_read_whole_again(
    aws_settings: Settings,
    dynamodb: Any,
    sessions: SessionStore,
    fleet: list[WorkerInfo],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The digest says how many sessions there are: a worker reading a window goes back to
    whole reads once they are few enough."""
    monkeypatch.setattr(fleet_module.random, "random", lambda: 0.0)
    writer, _, _ = watcher(aws_settings, dynamodb, sessions, fleet[0])
    reader, _, _ = watcher(aws_settings, dynamodb, sessions, fleet[1])
    async with asyncio.TaskGroup() as tasks:
        for _ in range(fleet_module.DIGEST_READ_ROUNDS):
            await writer.refresh(tasks)
            await reader.refresh(tasks)
        assert len(await reader.refresh(tasks)) < SESSIONS, "a window"
        for w in fleet[rules.FULL_READ_MAX_SESSIONS - 2 :]:  # most of the fleet is gone
            sessions.expire(w.worker_id, by="test", seen_hb=None)
            sessions.delete(w.worker_id)
        await writer.refresh(tasks)
        for _ in range(fleet_module.DIGEST_READ_ROUNDS):
            await reader.refresh(tasks)
        whole = await reader.refresh(tasks)
    assert len(whole) == rules.FULL_READ_MAX_SESSIONS - 2


async def test_a_small_fleet_counts_the_load_its_peers_renewals_wrote_on_their_items(
    aws_settings: Settings, dynamodb: Any, sessions: SessionStore
) -> None:
    """The ``fleet`` index does not carry the load: the watcher reads it from the peers' items,
    and until every sharing peer has published one the fleet has no load (counts decide)."""
    small = [item(n) for n in range(3)]
    for w in small:
        sessions.create(w)
    watch, _, view = watcher(aws_settings, dynamodb, sessions, small[0], my_load=1.0)
    sessions.renew(
        "w01",
        expires_at_ms=START + 10**9,
        now_ms=START,
        active_streams=10,
        load_milli=2_000,
        cpu_permille=300,
    )
    await watch.refresh()
    assert view.load is None, "w02 has published no load yet"

    sessions.renew(
        "w02",
        expires_at_ms=START + 10**9,
        now_ms=START,
        active_streams=10,
        load_milli=6_000,
        cpu_permille=900,
    )
    watcher_now, _, view_now = watcher(aws_settings, dynamodb, sessions, small[0], my_load=1.0)
    await watcher_now.refresh()
    assert view_now.load is not None
    assert view_now.load.mean == pytest.approx(3.0)
