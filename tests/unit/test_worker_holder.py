"""One held stream, end to end inside one event loop: a real upstream simulator and websocket,
a recording sink and lease store. Covers the order of the last steps for every way a holding
ends, and the self-fencing timer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from local.upstream_sim import UpstreamSimulator
from streamlease.errors import SinkError
from streamlease.model import Lease
from streamlease.settings import Settings
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.holder import EndReason, StreamHolder
from worker.identity import Identity
from worker.lease_events import LeaseEventLog
from worker.metrics import WorkerMetrics
from worker.sinks import SinkRecord

WORKER = "w1/1-abcd"
SETTINGS = Settings(
    lease_seconds=1.0,
    heartbeat_seconds=0.25,
    fence_margin_seconds=0.3,
    allow_insecure_ws=True,
    allow_loopback_upstreams=True,
    backoff_base_seconds=0.01,
    backoff_max_seconds=0.2,
    receive_queue_size=50,
    sink="null",
)


@dataclass
class Journal:
    """Everything the fakes saw, in order: ("write", first, last, mono), ("release", ...)."""

    entries: list[tuple[Any, ...]] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return [e[0] for e in self.entries]

    def written(self) -> list[int]:
        return [seq for e in self.entries if e[0] == "write" for seq in range(e[1], e[2] + 1)]


class RecordingSink:
    """A sink that journals each write; optionally slow, optionally failing a few times."""

    def __init__(self, journal: Journal, delay: float = 0.0, failures: int = 0) -> None:
        self.journal, self.delay, self.failures = journal, delay, failures

    async def write(self, records: Sequence[SinkRecord]) -> None:
        started = time.monotonic()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failures:
            self.failures -= 1
            raise SinkError("disk on fire")
        self.journal.entries.append(("write", records[0].seq, records[-1].seq, started))

    async def close(self) -> None:
        pass


class RecordingStore:
    """The part of LeaseStore a holder calls."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.errors: list[str] = []

    def release(self, stream_id: str, owner: str, epoch: int, **kwargs: Any) -> bool:
        self.journal.entries.append(("release", kwargs.get("last_seq"), kwargs.get("last_error")))
        return True

    def record_error(self, stream_id: str, owner: str, epoch: int, message: str) -> None:
        self.errors.append(message)


class RecordingHandoffs:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    async def send_handoff(self, stream_id: str, generation: int) -> bool:
        self.journal.entries.append(("handoff", stream_id, generation))
        return True


class NoRenewals:
    def __init__(self) -> None:
        self.untracked: list[tuple[str, int]] = []

    def untrack(self, stream_id: str, epoch: int) -> None:
        self.untracked.append((stream_id, epoch))


@dataclass
class Rig:
    sim: UpstreamSimulator
    journal: Journal
    ctx: WorkerContext
    store: RecordingStore
    renewals: NoRenewals
    events_path: Path

    def holder(self, stream_id: str, *, deadline_in: float = 1000.0, **query: Any) -> StreamHolder:
        lease = Lease(
            stream_id=stream_id,
            owner=WORKER,
            epoch=4,
            expires_at_ms=0,
            last_seq=0,
            ws_url=self.sim.url_for(stream_id, **query),
            generation=2,
        )
        now = time.monotonic()
        return StreamHolder(
            lease, self.ctx, self.renewals, acquired_mono=now, deadline_mono=now + deadline_in
        )

    def events(self) -> list[str]:
        self.ctx.events.close()
        lines = self.events_path.read_text().splitlines() if self.events_path.exists() else []
        return [line.split('"event":"')[1].split('"')[0] for line in lines]


@pytest.fixture
async def sim() -> AsyncIterator[UpstreamSimulator]:
    async with UpstreamSimulator(default_rate=200.0) as server:
        yield server


def make_rig(sim: UpstreamSimulator, tmp_path: Path, sink: RecordingSink | None = None) -> Rig:
    journal = sink.journal if sink else Journal()
    store = RecordingStore(journal)
    events_path = tmp_path / "events.jsonl"
    ctx = WorkerContext(
        settings=SETTINGS,
        identity=Identity(WORKER, "", "host", 1, "test"),
        store=cast(Any, store),
        sink=sink or RecordingSink(journal),
        metrics=WorkerMetrics(),
        events=LeaseEventLog(str(events_path), WORKER),
        handoffs=RecordingHandoffs(journal),
    )
    return Rig(sim, journal, ctx, store, NoRenewals(), events_path)


async def until(condition: Any, limit_seconds: float = 5.0) -> None:
    """Poll ``condition`` (state owned by other tasks of this loop) with a bound."""
    async with asyncio.timeout(limit_seconds):
        while not condition():  # noqa: ASYNC110 - the state has no event to wait on
            await asyncio.sleep(0.01)


async def test_shutdown_drains_then_checkpoints_then_releases_then_hands_off(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """Graceful end: stop reading, deliver what is queued, release with the last acknowledged
    seq as the final checkpoint, and only then send the handoff. Nothing is written after the
    release, so the next owner (resuming at last_seq + 1) repeats nothing."""
    journal = Journal()
    rig = make_rig(sim, tmp_path, RecordingSink(journal, delay=0.02))
    holder = rig.holder("s1")
    task = asyncio.create_task(holder.run())
    await until(lambda: holder.acked_seq >= 20)
    holder.request_end(EndReason.SHUTDOWN)
    await asyncio.wait_for(task, 10)

    kinds = journal.kinds()
    assert kinds[-2:] == ["release", "handoff"]
    assert set(kinds[:-2]) == {"write"}
    written = journal.written()
    assert written == list(range(1, len(written) + 1))
    release = journal.entries[-2]
    assert release[1] == written[-1] == holder.acked_seq
    assert journal.entries[-1] == ("handoff", "s1", 2)
    assert rig.events()[-2:] == ["released", "handoff"]
    await until(lambda: sim.stats("s1").open == 0)


async def test_stop_closes_and_releases_without_handoff(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """A stopped stream is released with its final checkpoint; nobody is asked to take it."""
    rig = make_rig(sim, tmp_path)
    holder = rig.holder("s2")
    task = asyncio.create_task(holder.run())
    await until(lambda: holder.acked_seq >= 5)
    holder.request_end(EndReason.STOPPED)
    await asyncio.wait_for(task, 10)

    assert rig.journal.kinds()[-1] == "release"
    assert "handoff" not in rig.journal.kinds()
    assert rig.events() == ["stopped", "released"]


async def test_the_deadline_fences_delivery_without_any_answer(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """No renewal ever extends the deadline: the holder's own timer stops delivery before it —
    no sink write starts at or after the deadline — then it records "fenced" and tries once
    to release the lapsed lease."""
    rig = make_rig(sim, tmp_path)
    holder = rig.holder("s3", deadline_in=0.5)
    deadline = holder.deadline_mono
    await asyncio.wait_for(holder.run(), 10)

    writes = [e for e in rig.journal.entries if e[0] == "write"]
    assert writes, "it delivered until the deadline"
    assert all(started < deadline for *_, started in writes)
    assert holder.end_reason is EndReason.FENCED
    assert rig.events() == ["fenced"]
    assert rig.journal.kinds()[-1] == "release"
    assert rig.ctx.metrics.total(WorkerMetric.LEASES_LOST) == 1
    assert ("s3", 4) in rig.renewals.untracked


async def test_a_lost_lease_stops_at_once_and_writes_nothing_more(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """Lost: no more sink writes after the write in flight, no release, no handoff."""
    rig = make_rig(sim, tmp_path)
    holder = rig.holder("s4")
    task = asyncio.create_task(holder.run())
    await until(lambda: holder.acked_seq >= 5)
    holder.request_end(EndReason.LOST)
    writes_then = len(rig.journal.entries)
    await asyncio.wait_for(task, 10)

    assert len(rig.journal.entries) <= writes_then + 1
    assert "release" not in rig.journal.kinds()
    assert rig.events() == ["lost"]


async def test_sink_failures_are_retried_and_never_checkpointed(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """A failing sink write is retried; the checkpoint moves only past acknowledged records."""
    journal = Journal()
    rig = make_rig(sim, tmp_path, RecordingSink(journal, failures=2))
    holder = rig.holder("s5")
    task = asyncio.create_task(holder.run())
    await until(lambda: holder.acked_seq >= 10)
    holder.request_end(EndReason.SHUTDOWN)
    await asyncio.wait_for(task, 10)

    written = journal.written()
    assert written == list(range(1, len(written) + 1))
    assert rig.ctx.metrics.total(WorkerMetric.SINK_ERRORS) == 2
    assert journal.entries[-2][1] == written[-1]


async def test_a_forbidden_upstream_is_parked_with_its_error(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """HTTP 403: the holder keeps the stream, records the error, delivers nothing."""
    rig = make_rig(sim, tmp_path)
    holder = rig.holder("s6", reject=403)
    task = asyncio.create_task(holder.run())
    await until(lambda: rig.store.errors)
    assert holder.is_active
    assert "403" in rig.store.errors[0]
    holder.request_end(EndReason.SHUTDOWN)
    await asyncio.wait_for(task, 10)
    assert rig.journal.written() == []
