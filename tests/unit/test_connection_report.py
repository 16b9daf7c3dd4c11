"""The worker's connection-state writer: changes soon, a flapping stream coalesced, repeats
rare, writes bounded in number at once, a lost lease reported to its holder; the trouble a
stream's progress shows written as its state, the progress itself written rarely and only when
it changed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest

from streamlease.errors import LeaseLost, StoreError
from streamlease.model import Lease, StreamProgress
from streamlease.schema import ConnectionState
from worker.stream.connection_report import ConnectionReport
from worker.stream.progress import ProgressWatch
from worker.stream.sequence import Sequencer

CONNECTED, RETRYING = ConnectionState.CONNECTED, ConnectionState.RETRYING


def lease(stream_id: str, epoch: int = 3) -> Lease:
    return Lease(stream_id, "w1/1-ab", epoch, 0, 0, "wss://x.example/", 1)


class Store:
    """Records record_connection calls (from worker threads); may fail or be slow."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, int, ConnectionState, str | None]] = []
        self.progress: list[tuple[str, StreamProgress, bool]] = []
        """Progress written: stream, counters, and whether it rode on a state write."""
        self.fail: type[Exception] | None = None
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def record_progress(
        self, stream_id: str, owner: str, epoch: int, progress: StreamProgress
    ) -> None:
        self.progress.append((stream_id, progress, False))

    def record_connection(
        self,
        stream_id: str,
        owner: str,
        epoch: int,
        state: ConnectionState,
        error: str | None,
        progress: StreamProgress | None = None,
    ) -> None:
        if progress is not None:
            self.progress.append((stream_id, progress, True))
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            if self.fail is LeaseLost:
                raise LeaseLost(stream_id, epoch, "another owner")
            if self.fail is not None:
                raise self.fail("table unreachable")
            self.calls.append((stream_id, epoch, state, error))
        finally:
            with self._lock:
                self.in_flight -= 1


async def until(condition: Callable[[], bool], limit_seconds: float = 5.0) -> None:
    async with asyncio.timeout(limit_seconds):
        while not condition():  # noqa: ASYNC110 - written from worker threads
            await asyncio.sleep(0.005)


@pytest.fixture
async def running() -> AsyncIterator[Callable[..., tuple[ConnectionReport, Store]]]:
    tasks: list[asyncio.Task[None]] = []

    def start(store: Store | None = None, **options: Any) -> tuple[ConnectionReport, Store]:
        report = ConnectionReport(**options)
        store = store or Store()
        tasks.append(asyncio.create_task(report.run(cast(Any, store))))
        return report, store

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def ignore() -> None:
    pass


async def test_a_change_is_written_soon(running: Any) -> None:
    report, store = running(min_gap_seconds=10.0)
    report.note(lease("s1"), RETRYING, "refused", ignore)
    await until(lambda: store.calls == [("s1", 3, RETRYING, "refused")])
    assert report.pending == 0


async def test_a_flapping_stream_coalesces_into_its_latest_state(running: Any) -> None:
    """Within the gap after a write, many changes make one more write: the latest."""
    report, store = running(min_gap_seconds=0.3)
    report.note(lease("s1"), RETRYING, "dropped", ignore)
    await until(lambda: len(store.calls) == 1)
    for n in range(20):
        report.note(lease("s1"), CONNECTED if n % 2 else RETRYING, f"drop {n}", ignore)
    await until(lambda: len(store.calls) == 2)
    await asyncio.sleep(0.4)
    assert store.calls[1] == ("s1", 3, CONNECTED, "drop 19")
    assert len(store.calls) == 2


async def test_the_same_state_and_error_is_repeated_only_after_a_while(running: Any) -> None:
    report, store = running(min_gap_seconds=0.01, repeat_seconds=0.3)
    report.note(lease("s1"), RETRYING, "refused", ignore)
    await until(lambda: len(store.calls) == 1)
    report.note(lease("s1"), RETRYING, "refused", ignore)
    await asyncio.sleep(0.1)
    assert len(store.calls) == 1
    await asyncio.sleep(0.25)
    report.note(lease("s1"), RETRYING, "refused", ignore)
    await until(lambda: len(store.calls) == 2)


async def test_every_stream_gets_its_state_with_few_writes_at_once(running: Any) -> None:
    """An outage that makes 40 upstreams retry at once: 40 writes, at most 4 in flight."""
    report, store = running(Store(delay=0.01), parallel_writes=4)
    for n in range(40):
        report.note(lease(f"s{n}"), RETRYING, "upstream refused the TCP connection", ignore)
    await until(lambda: len(store.calls) == 40)
    assert store.most_in_flight <= 4
    assert {c[0] for c in store.calls} == {f"s{n}" for n in range(40)}


async def test_a_lost_lease_is_told_to_its_holder_and_forgotten(running: Any) -> None:
    report, store = running()
    store.fail = LeaseLost
    lost: list[str] = []
    report.note(lease("s1"), CONNECTED, None, lambda: lost.append("s1"))
    await until(lambda: lost == ["s1"])
    store.fail = None
    report.note(lease("s1"), RETRYING, "x", ignore)
    await until(lambda: len(store.calls) == 1)  # a new entry for the same lease: written again


async def test_an_unanswered_write_waits_for_the_next_change(running: Any) -> None:
    report, store = running(min_gap_seconds=0.01)
    store.fail = StoreError
    report.note(lease("s1"), RETRYING, "dropped", ignore)
    await asyncio.sleep(0.1)
    store.fail = None
    assert store.calls == []
    report.note(lease("s1"), CONNECTED, None, ignore)
    await until(lambda: store.calls == [("s1", 3, CONNECTED, None)])


async def test_a_forgotten_holding_writes_nothing(running: Any) -> None:
    report, store = running(min_gap_seconds=0.3)
    report.note(lease("s1"), RETRYING, "first", ignore)
    await until(lambda: len(store.calls) == 1)
    report.note(lease("s1"), CONNECTED, None, ignore)  # due only after the gap
    report.forget("s1", 3)
    await asyncio.sleep(0.45)
    assert len(store.calls) == 1


def watched(idle_seconds: float = 60.0) -> ProgressWatch:
    return ProgressWatch(Sequencer(("seq",), 0), idle_seconds)


async def test_a_quiet_stream_is_written_stalled_with_its_progress(running: Any) -> None:
    """No state was noted beyond connected: the writer's own look at the progress finds the
    stream quiet past its idle threshold and writes ``stalled``, the counters with it."""
    report, store = running(min_gap_seconds=0.01, scan_seconds=0.05)
    progress = watched(idle_seconds=0.3)
    progress.received = progress.delivered = 7
    report.track(lease("s1"), progress, ignore)
    report.note(lease("s1"), CONNECTED, None, ignore)
    await until(lambda: [c[2] for c in store.calls] == [CONNECTED, ConnectionState.STALLED])
    assert store.calls[-1][3] == "no frame for 0.3 s"
    assert [(p.delivered, rode) for _, p, rode in store.progress] == [(7, True), (7, True)]


async def test_progress_alone_is_written_at_most_every_interval_and_only_when_it_changed(
    running: Any,
) -> None:
    """A busy stream with no state change: its counters are written once per interval; an
    interval in which they did not change writes nothing."""
    report, store = running(scan_seconds=0.02, progress_seconds=0.2, rand=lambda: 0.0)
    progress = watched()
    report.track(lease("s1"), progress, ignore)
    report.note(lease("s1"), CONNECTED, None, ignore)
    await until(lambda: len(store.calls) == 1)
    for n in range(1, 26):  # 0.5 s of traffic
        progress.received = progress.delivered = n
        await asyncio.sleep(0.02)
    await until(lambda: store.progress[-1][1].delivered == 25)  # the last change is written
    alone = [p for _, p, rode in store.progress if not rode]
    assert 2 <= len(alone) <= 4  # 0.5 s of changes, an interval of 0.2 s
    written = len(store.progress)
    await asyncio.sleep(0.5)  # nothing changes
    assert len(store.progress) == written
    progress.delivered += 1
    await until(lambda: len(store.progress) == written + 1)
