"""The worker's connection-state writer: changes soon, a flapping stream coalesced, repeats
rare, writes bounded in number at once, a lost lease reported to its holder; the trouble a
stream's progress shows written as its state, the progress itself written rarely and only when
it changed.

Gaps, repeats, progress intervals and the idle threshold are judged on the writer's clock; the
tests of those drive a :class:`Clock` of their own, so they hold on a busy machine and take
milliseconds (the writer then wakes every ``scan_seconds`` of real time, at most).
"""

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


DRIVEN_SCAN = 0.01
"""``scan_seconds`` of the writers on a driven clock: seconds of that clock, and so at most
this long (real) between two of the writer's looks at it."""


class Clock:
    """A monotonic clock the test moves. It counts the writer's reads, so the test can wait
    until the writer has looked at the time it was moved to."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    async def advance(self, seconds: float) -> None:
        """Move on ``seconds``, then wait until the writer has looked at everything at the new
        time: two reads after the move (the first may be its wait's, the second is then its
        pass over the streams)."""
        self.now += seconds
        seen = self.reads
        await until(lambda: self.reads >= seen + 2)

    async def until(self, condition: Callable[[], bool], step: float) -> None:
        """Move on ``step`` at a time until ``condition()`` holds (within 1,000 steps)."""
        for _ in range(1000):
            if condition():
                return
            await self.advance(step)
            await asyncio.sleep(0.001)  # a write handed to a thread lands
        pytest.fail("not within 1,000 steps of the clock")


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
    """Within the gap after a write, many changes make one more write: the latest, once the
    gap has passed."""
    clock = Clock()
    report, store = running(min_gap_seconds=0.3, scan_seconds=DRIVEN_SCAN, clock=clock)
    report.note(lease("s1"), RETRYING, "dropped", ignore)
    await until(lambda: len(store.calls) == 1)
    for n in range(20):
        report.note(lease("s1"), CONNECTED if n % 2 else RETRYING, f"drop {n}", ignore)
        await clock.advance(0.01)
    assert len(store.calls) == 1, "written again within the gap"
    await clock.until(lambda: len(store.calls) == 2, step=0.05)
    for _ in range(10):  # a second gap and more: nothing new to write
        await clock.advance(0.05)
    assert store.calls[1] == ("s1", 3, CONNECTED, "drop 19")
    assert len(store.calls) == 2


async def test_the_same_state_and_error_is_repeated_only_after_a_while(running: Any) -> None:
    clock = Clock()
    report, store = running(
        min_gap_seconds=0.01, repeat_seconds=60.0, scan_seconds=DRIVEN_SCAN, clock=clock
    )
    report.note(lease("s1"), RETRYING, "refused", ignore)
    await until(lambda: len(store.calls) == 1)
    report.note(lease("s1"), RETRYING, "refused", ignore)
    await clock.advance(59.0)
    assert len(store.calls) == 1
    await clock.advance(1.0)
    report.note(lease("s1"), RETRYING, "refused", ignore)
    await clock.until(lambda: len(store.calls) == 2, step=DRIVEN_SCAN)


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
    clock = Clock()
    report, store = running(min_gap_seconds=0.3, scan_seconds=DRIVEN_SCAN, clock=clock)
    report.note(lease("s1"), RETRYING, "first", ignore)
    await until(lambda: len(store.calls) == 1)
    report.note(lease("s1"), CONNECTED, None, ignore)  # due only after the gap
    report.forget("s1", 3)
    for _ in range(10):  # the gap and more
        await clock.advance(0.05)
    assert len(store.calls) == 1


def watched(idle_seconds: float = 60.0) -> ProgressWatch:
    return ProgressWatch(Sequencer(("seq",), 0), idle_seconds)


async def test_a_quiet_stream_is_written_stalled_with_its_progress(running: Any) -> None:
    """No state was noted beyond connected: the writer's own look at the progress finds the
    stream quiet past its idle threshold (a minute, on the writer's clock) and writes
    ``stalled``, the counters with it; not a moment before."""
    clock = Clock()
    report, store = running(min_gap_seconds=0.01, scan_seconds=DRIVEN_SCAN, clock=clock)
    progress = watched(idle_seconds=60.0)
    progress.received = progress.delivered = 7
    report.track(lease("s1"), progress, ignore)
    report.note(lease("s1"), CONNECTED, None, ignore)
    await until(lambda: [c[2] for c in store.calls] == [CONNECTED])
    await clock.advance(59.0)
    await clock.advance(DRIVEN_SCAN)
    assert [c[2] for c in store.calls] == [CONNECTED], "stalled before its threshold"
    await clock.until(lambda: len(store.calls) == 2, step=1.0)
    assert store.calls[-1][2:] == (ConnectionState.STALLED, "no frame for 60 s")
    assert [(p.delivered, rode) for _, p, rode in store.progress] == [(7, True), (7, True)]


async def test_progress_alone_is_written_at_most_every_interval_and_only_when_it_changed(
    running: Any,
) -> None:
    """A busy stream with no state change: its counters are written once per interval; an
    interval in which they did not change writes nothing."""
    clock = Clock()
    report, store = running(
        scan_seconds=DRIVEN_SCAN, progress_seconds=0.2, rand=lambda: 0.0, clock=clock
    )
    progress = watched()
    report.track(lease("s1"), progress, ignore)
    report.note(lease("s1"), CONNECTED, None, ignore)
    await until(lambda: len(store.calls) == 1)
    for n in range(1, 26):  # 0.5 s of traffic
        progress.received = progress.delivered = n
        await clock.advance(0.02)
    # The last change is written, at the next interval.
    await clock.until(lambda: store.progress[-1][1].delivered == 25, step=0.02)
    alone = [p for _, p, rode in store.progress if not rode]
    assert 2 <= len(alone) <= 4  # 0.5 s of changes, an interval of 0.2 s
    written = len(store.progress)
    for _ in range(25):  # 0.5 s in which nothing changes
        await clock.advance(0.02)
    assert len(store.progress) == written
    progress.delivered += 1
    await clock.until(lambda: len(store.progress) == written + 1, step=0.02)


async def test_the_first_acknowledged_seq_is_written_at_once_then_the_schedule_resumes(
    running: Any,
) -> None:
    """A holding's first acknowledged batch is reported within a scan, with its seq (the first
    reading a rate is computed from); later progress waits for the interval's due time as
    before, so a holding makes one progress write more, not one per scan."""
    clock = Clock()
    report, store = running(
        scan_seconds=DRIVEN_SCAN, progress_seconds=300.0, rand=lambda: 0.5, clock=clock
    )
    progress = watched(idle_seconds=10_000.0)  # never stalled here
    report.track(lease("s1"), progress, ignore)
    report.note(lease("s1"), CONNECTED, None, ignore)
    await until(lambda: len(store.calls) == 1)
    assert [p.seq for _, p, _ in store.progress] == [None]
    progress.received = progress.delivered = 5
    progress.acked_seq = 105
    await clock.until(lambda: len(store.progress) == 2, step=0.02)
    assert [(p.seq, rode) for _, p, rode in store.progress[1:]] == [(105, False)]
    progress.received = progress.delivered = 100
    progress.acked_seq = 200
    for _ in range(50):  # a second of the clock: nothing until the interval's due time
        await clock.advance(0.02)
    assert len(store.progress) == 2
    await clock.until(lambda: len(store.progress) == 3, step=1.0)
    assert clock.now >= 1000.0 + 150.0  # the first scheduled write: rand 0.5 of 300 s
    assert store.progress[-1][1].seq == 200
