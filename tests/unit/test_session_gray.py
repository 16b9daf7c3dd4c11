"""A session whose renewals go unanswered (architecture §4a, gray failure): the renewal thread
against a scripted store, at a lease of 0.4 s.

The store's answers are scripted, not the timing: the thread revokes only when a read of the
session is answered while its renewals are not, never renews after deciding to, and a session
on probation takes nothing until one of its renewals succeeded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from streamlease import rules
from streamlease.errors import StoreError
from streamlease.model import WorkerInfo
from streamlease.schema import Liveness, WorkerState
from streamlease.session_store import Expiry
from streamlease.settings import Settings
from worker.fencing.session import Session, SessionState
from worker.identity import Identity
from worker.lease_event_log import LeaseEventLog

SETTINGS = Settings(lease_seconds=0.4, heartbeat_seconds=0.1, fence_margin_seconds=0.1)
ME = "w1/1-abcd"


class ScriptedStore:
    """The renewal thread's store: renewals answer or not, the session read answers with the
    item in ``read_state`` (None: gone), or not at all."""

    def __init__(self, *, renewals: bool, read: bool, read_state: WorkerState | None) -> None:
        self.renewals_answer = renewals
        self.read_answers = read
        self.read_state = read_state
        self.calls: list[str] = []
        self.capacities: list[int | None] = []
        """The capacity each renewal advertised, in order."""
        self._lock = threading.Lock()

    def _call(self, name: str) -> None:
        with self._lock:
            self.calls.append(name)

    def create(self, info: WorkerInfo) -> None:
        self._call("create")

    def renew(self, worker_id: str, *, capacity: int | None = None, **_: Any) -> None:
        self._call("renew")
        with self._lock:
            self.capacities.append(capacity)
        if not self.renewals_answer:
            raise StoreError("read timeout")

    def read(self, worker_id: str, *, consistent: bool = True) -> WorkerInfo | None:
        self._call("read")
        if not self.read_answers:
            raise StoreError("read timeout")
        if self.read_state is None:
            return None
        return WorkerInfo(worker_id, self.read_state, 0, 0, 0, 10, "h", 1, hb=7)

    def expire(self, worker_id: str, *, by: str, seen_hb: int | None) -> Expiry:
        self._call(f"expire by {by} seen {seen_hb}")
        return Expiry(True, None)


def make_session(
    store: ScriptedStore,
    lost: list[SessionState],
    *,
    probation: bool,
    settings: Settings = SETTINGS,
    leases_unanswered: Callable[[], bool] | None = None,
) -> Session:
    identity = Identity(worker_id=ME, task_arn="", host="h", pid=1, version="test")
    session = Session(
        ME,
        settings,
        identity,
        store,  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
        LeaseEventLog("", ME),
        on_expired=lambda s: lost.append(s.state),
        active_streams=lambda: 0,
        probation=probation,
        leases_unanswered=leases_unanswered,
    )
    return session


EVENT_CAP_SECONDS = 20.0
"""How long a test waits for what it expects (a read, a renewal, the session lost) before it
fails: generous, since the event is what is asserted, not how soon it came."""


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (polling every few milliseconds) until ``condition()`` holds; fail after the cap."""
    try:
        async with asyncio.timeout(EVENT_CAP_SECONDS):
            while not condition():  # noqa: ASYNC110 (the thread's calls set no event)
                await asyncio.sleep(0.005)
    except TimeoutError:
        pytest.fail(f"{what}: not within {EVENT_CAP_SECONDS:.0f} s")


async def run_until_over(session: Session) -> None:
    """Open ``session``, start its renewal thread and wait until the thread has ended by itself
    (the session is over), within the cap."""
    await session.open()
    session.start()
    thread = session._thread
    assert thread is not None
    try:
        await until(lambda: not thread.is_alive() and not session.live, "the session over")
    finally:
        session.stop()


def test_renewals_unanswered_while_the_store_answers_a_read_revoke_the_session() -> None:
    """Past the deadline the thread reads the session; the store answers, and a renewal sent
    after that read fails too, so the renewals are what fails: the session is lost (REVOKED)
    and its tombstone written with no hb condition, by the worker itself; no renewal is sent
    after that (the thread ends)."""
    store = ScriptedStore(renewals=False, read=True, read_state=WorkerState.RUNNING)
    lost: list[SessionState] = []
    session = make_session(store, lost, probation=False)
    asyncio.run(run_until_over(session))
    assert lost == [SessionState.REVOKED]
    assert session.state is SessionState.REVOKED
    assert store.calls.count(f"expire by {ME} seen None") == 1
    after = store.calls[store.calls.index("read") + 1 :]
    assert after == ["renew", f"expire by {ME} seen None"], "a renewal after the revoke"


class RecoveringStore(ScriptedStore):
    """A brownout that ends just as the thread reads its session: renewals answer from the
    read on."""

    def read(self, worker_id: str, *, consistent: bool = True) -> WorkerInfo | None:
        self.renewals_answer = True
        return super().read(worker_id, consistent=consistent)


def test_a_renewal_answered_after_the_read_goes_on_renewing() -> None:
    """The renewal that failed was sent while the store was slow for everyone; the read is
    answered because the slowness has just ended. The renewal the thread sends after the
    read is answered too: nothing is revoked, the session is healthy again."""
    store = RecoveringStore(renewals=False, read=True, read_state=WorkerState.RUNNING)
    lost: list[SessionState] = []
    session = make_session(store, lost, probation=False)

    async def scenario() -> None:
        await session.open()
        session.start()
        try:
            await until(lambda: "read" in store.calls, "a read of the session")
            await until(session.healthy, "the session healthy again")
            await until(
                lambda: store.calls[store.calls.index("read") :].count("renew") >= 3,
                "renewals going on after the read",
            )
        finally:
            session.stop()

    asyncio.run(scenario())
    assert lost == []
    assert session.live
    assert not any(c.startswith("expire") for c in store.calls)


def test_renewals_and_reads_unanswered_go_on_renewing() -> None:
    """The store answers nothing (an outage, a brownout for everyone): no revoke; the thread
    keeps renewing past its reads of the session, so the session resumes the moment a renewal
    gets through."""
    store = ScriptedStore(renewals=False, read=False, read_state=WorkerState.RUNNING)
    lost: list[SessionState] = []
    session = make_session(store, lost, probation=False)
    calls = store.calls

    def renewed_after_read(reads: int) -> bool:
        if calls.count("read") < reads:
            return False
        last_read = len(calls) - calls[::-1].index("read")
        return "renew" in calls[last_read:]

    async def scenario() -> None:
        await session.open()
        session.start()
        try:
            # Two reads unanswered, each followed by more renewals: it goes on, read after read.
            await until(lambda: renewed_after_read(2), "a renewal after the second read")
            assert session.live and lost == []
            store.renewals_answer = True
            await until(session.healthy, "the session healthy again once a renewal got through")
        finally:
            session.stop()

    asyncio.run(scenario())
    assert lost == []
    assert session.live
    assert not any(c.startswith("expire") for c in store.calls)


def test_a_session_expired_by_a_peer_is_lost_without_a_revoke() -> None:
    """The read shows the session tombstoned already: it is lost, nothing is written."""
    store = ScriptedStore(renewals=False, read=True, read_state=WorkerState.EXPIRED)
    lost: list[SessionState] = []
    session = make_session(store, lost, probation=False)
    asyncio.run(run_until_over(session))
    assert lost == [SessionState.EXPIRED]
    assert not any(c.startswith("expire") for c in store.calls)


@pytest.mark.parametrize("renewals", [True, False], ids=["renewed", "unanswered"])
def test_a_session_on_probation_is_healthy_only_after_a_renewal(renewals: bool) -> None:
    """A worker's next session after a lost one takes nothing and judges no peer until one of
    its own renewals succeeded (its create is not enough)."""
    store = ScriptedStore(renewals=renewals, read=False, read_state=None)
    session = make_session(store, [], probation=True)
    healthy_at_start: list[bool] = []

    async def scenario() -> None:
        await session.open()
        healthy_at_start.append(session.healthy())
        session.start()
        try:
            if renewals:
                await until(session.healthy, "healthy after its first renewal")
            else:
                await until(lambda: store.calls.count("renew") >= 2, "two renewals sent")
                await asyncio.sleep(0)  # what the thread handed to the loop has run
        finally:
            session.stop()

    asyncio.run(scenario())
    assert healthy_at_start == [False]
    assert session.healthy() is renewals


def test_a_worker_is_unreachable_after_four_leases_without_an_answer() -> None:
    """The give-up bound counts from the last renewal answered."""
    assert not rules.is_unreachable(100.0, 100.0 - 3.9 * 20, 20.0)
    assert rules.is_unreachable(100.0, 100.0 - rules.UNREACHABLE_LEASES * 20, 20.0)


def test_a_worker_whose_lease_renewals_go_unanswered_advertises_no_capacity() -> None:
    """Per-stream leases (architecture §4b): the worker item renews fine, but while the worker's
    lease renewals go unanswered its item's renewals advertise a capacity of 0, so its peers
    leave it out of the fair share; once they are answered again, its capacity again."""
    settings = dataclasses.replace(SETTINGS, liveness=Liveness.STREAM)
    store = ScriptedStore(renewals=True, read=False, read_state=None)
    unanswered = False
    session = make_session(
        store, [], probation=False, settings=settings, leases_unanswered=lambda: unanswered
    )
    sent = store.capacities

    async def until(advertised: Callable[[], bool]) -> None:
        async with asyncio.timeout(20 * settings.heartbeat_seconds):
            while not advertised():
                await session.wait_renewed(settings.heartbeat_seconds)

    async def scenario() -> None:
        nonlocal unanswered
        await session.open()
        session.start()
        try:
            await until(lambda: settings.capacity in sent)
            unanswered = True
            await until(lambda: 0 in sent)
            unanswered = False
            await until(lambda: sent[-1] == settings.capacity)
        finally:
            session.stop()

    asyncio.run(scenario())
    withheld = sent.index(0)
    assert set(sent[:withheld]) == {settings.capacity}
    assert sent[-1] == settings.capacity
    assert session.live
