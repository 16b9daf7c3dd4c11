"""One held stream, end to end inside one event loop: a real upstream simulator and websocket,
a recording sink and lease store. Covers the order of the last steps for every way a holding
ends, the self-fencing timer of a per-stream lease, the pause and resume of a stream attached
to a session (through the worker's delivery gate), and the memory bound under a slow sink."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from local.jsonl_tail import read_jsonl
from local.upstream_sim import UpstreamSimulator
from streamlease.errors import LeaseLost, SinkError, StoreError
from streamlease.lease_events import LeaseEvent
from streamlease.model import Lease, Stream, StreamProgress
from streamlease.schema import DesiredState
from streamlease.settings import Settings
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fencing.fence import Fence, LeaseFence
from worker.fencing.slots import HeldCheckpoint
from worker.identity import Identity
from worker.lease_event_log import LeaseEventLog
from worker.metrics import WorkerMetrics
from worker.ownership.end_reason import EndReason
from worker.ownership.holder import StreamHolder
from worker.sinks import BufferedSink, SinkBatch
from worker.sinks.base import deadline_passed_error
from worker.stream.delivery import MAX_WAITING_BYTES

WORKER = "w1/1-abcd"
SETTINGS = Settings(
    lease_seconds=1.0,
    heartbeat_seconds=0.25,
    fence_margin_seconds=0.3,
    allow_insecure_ws=True,
    allow_loopback_upstreams=True,
    backoff_base_seconds=0.01,
    backoff_max_seconds=0.2,
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


class RecordingSink(BufferedSink):
    """A sink that journals each batch it stores; optionally slow (per store), optionally
    failing a few batches (or all). It keeps the sink contract: nothing is sent once the
    deadline has passed."""

    def __init__(self, journal: Journal, delay: float = 0.0, failures: float = 0) -> None:
        super().__init__()
        self.journal, self.delay, self.failures = journal, delay, failures
        self.attempts: list[float] = []
        """Start time of every batch that was sent (monotonic)."""

    async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
        if self.delay:
            await asyncio.sleep(self.delay)
        outcomes: list[SinkError | None] = []
        for batch in batches:
            records = batch.records
            if batch.deadline.remaining_seconds() <= 0:
                outcomes.append(deadline_passed_error(records))
                continue
            started = time.monotonic()
            self.attempts.append(started)
            if self.failures:
                self.failures -= 1
                outcomes.append(SinkError("disk on fire", unsent=records))
                continue
            self.journal.entries.append(("write", records[0].seq, records[-1].seq, started))
            outcomes.append(None)
        return outcomes


class RecordingStore:
    """The part of LeaseStore a holder calls."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.errors: list[str] = []
        self.states: list[str] = []
        self.progress: list[StreamProgress] = []
        self.released_progress: StreamProgress | None = None
        self.state_after_release = DesiredState.STARTED

    def release(self, stream_id: str, owner: str, epoch: int, **kwargs: Any) -> Stream:
        self.journal.entries.append(("release", kwargs.get("last_seq"), kwargs.get("last_error")))
        self.released_progress = kwargs.get("progress")
        state = DesiredState.STOPPED if kwargs.get("stop") else self.state_after_release
        return Stream(stream_id, state, "", None, 0, kwargs.get("last_seq") or 0, epoch, 2)

    def record_connection(
        self,
        stream_id: str,
        owner: str,
        epoch: int,
        state: Any,
        error: str | None = None,
        *,
        progress: StreamProgress | None = None,
    ) -> None:
        self.states.append(str(state))
        if error is not None:
            self.errors.append(error)
        if progress is not None:
            self.progress.append(progress)

    def record_progress(
        self, stream_id: str, owner: str, epoch: int, progress: StreamProgress
    ) -> None:
        self.progress.append(progress)


class RecordingHandoffs:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.rebalance: list[bool] = []

    async def send_handoff(
        self, stream_id: str, generation: int, *, rebalance: bool = False
    ) -> bool:
        self.journal.entries.append(("handoff", stream_id, generation))
        self.rebalance.append(rebalance)
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
    report: asyncio.Task[None] | None = None

    def holder(
        self,
        stream_id: str,
        *,
        deadline_in: float = 1000.0,
        fence: Fence | None = None,
        **query: Any,
    ) -> StreamHolder:
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
        if fence is None:
            fence = LeaseFence(stream_id, 4, now + deadline_in, SETTINGS, self.renewals)
        return StreamHolder(lease, self.ctx, fence, acquired_mono=now)

    def events(self) -> list[str]:
        self.ctx.events.close()
        events, _ = read_jsonl([self.events_path], LeaseEvent.from_dict)
        return [str(e.event) for e in events]


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
        sessions=cast(Any, None),
        sink=sink or RecordingSink(journal),
        metrics=WorkerMetrics(),
        events=LeaseEventLog(str(events_path), WORKER),
        handoffs=RecordingHandoffs(journal),
    )
    rig = Rig(sim, journal, ctx, store, NoRenewals(), events_path)
    # The worker's connection-state writer, as the worker runs it (cancelled with the loop).
    rig.report = asyncio.get_running_loop().create_task(ctx.connections.run(ctx.store))
    return rig


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


READ_BYTES = 256 * 1024
"""The most one read of a socket returns (asyncio's and uvloop's buffer)."""


async def test_a_slow_sink_pauses_reading_instead_of_growing_memory(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """A flat-out upstream and a sink that takes 0.1 s a store: the holder never buffers more
    than two batches' worth (the one in the sink, the one waiting, each bounded), reading pauses
    and resumes as the sink keeps up, and what it delivers has no gap and no repeat."""
    journal = Journal()
    rig = make_rig(sim, tmp_path, RecordingSink(journal, delay=0.1))
    holder = rig.holder("slow", rate=0)
    task = asyncio.create_task(holder.run())
    most = 0
    for _ in range(100):
        await asyncio.sleep(0.01)
        most = max(most, holder.buffered_bytes)
        assert holder.buffered_bytes <= 2 * (MAX_WAITING_BYTES + READ_BYTES)
    received = rig.ctx.metrics.total(WorkerMetric.MESSAGES_RECEIVED)
    assert most > MAX_WAITING_BYTES  # the bound was reached: reading paused
    assert len(journal.written()) > 2 * received // 3  # and resumed, again and again
    assert sim.stats("slow").messages_sent > received  # the upstream could send far more
    holder.request_end(EndReason.SHUTDOWN)
    await asyncio.wait_for(task, 10)
    assert journal.written() == list(range(1, len(journal.written()) + 1))


async def test_stop_closes_and_releases_without_handoff(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """A stopped stream is released with its final checkpoint; nobody is asked to take it."""
    rig = make_rig(sim, tmp_path)
    rig.store.state_after_release = DesiredState.STOPPED
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
    """HTTP 403: the holder keeps the stream, records it as rejected with the error, delivers
    nothing."""
    rig = make_rig(sim, tmp_path)
    holder = rig.holder("s6", reject=403)
    task = asyncio.create_task(holder.run())
    await until(lambda: rig.store.errors)
    assert holder.is_active
    assert "403" in rig.store.errors[0]
    assert rig.store.states[0] == "rejected"
    holder.request_end(EndReason.SHUTDOWN)
    await asyncio.wait_for(task, 10)
    assert rig.journal.written() == []


async def test_a_stopped_stream_started_again_while_releasing_is_handed_off(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """The release shows the stream STARTED again (a start raced the stop): a worker is told at
    once instead of the stream waiting for reconciliation."""
    rig = make_rig(sim, tmp_path)
    holder = rig.holder("s7")
    task = asyncio.create_task(holder.run())
    await until(lambda: holder.acked_seq >= 3)
    holder.request_end(EndReason.STOPPED)
    await asyncio.wait_for(task, 10)
    assert rig.journal.kinds()[-2:] == ["release", "handoff"]


async def test_an_upstream_that_ends_the_stream_releases_it_stopped(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """Close 1000 from the upstream (the meeting ended): deliver what came, release with the
    stream set STOPPED and the reason recorded, count it, hand nothing off, do not reconnect."""
    rig = make_rig(sim, tmp_path)
    holder = rig.holder("s8", close_code=1000, close_after=5)
    await asyncio.wait_for(holder.run(), 10)
    assert holder.end_reason is EndReason.ENDED
    assert rig.journal.written() == [1, 2, 3, 4, 5]
    release = rig.journal.entries[-1]
    assert release[0] == "release" and release[1] == 5 and "1000" in release[2]
    assert rig.ctx.metrics.total(WorkerMetric.STREAMS_ENDED) == 1
    assert sim.attempts("s8") == 1


async def test_no_sink_attempt_starts_after_the_deadline_even_while_retrying(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """A slow sink that keeps failing: the holder's retries stop at the deadline — no attempt is
    sent after it — and the batch never acknowledged is never checkpointed."""
    journal = Journal()
    sink = RecordingSink(journal, delay=0.05, failures=float("inf"))
    rig = make_rig(sim, tmp_path, sink)
    holder = rig.holder("s9", deadline_in=0.6)
    deadline = holder.deadline_mono
    await asyncio.wait_for(holder.run(), 10)
    assert sink.attempts, "the sink was tried"
    assert all(started < deadline for started in sink.attempts)
    assert holder.end_reason is EndReason.FENCED
    assert holder.acked_seq == 0
    assert journal.written() == []


class FakeSession:
    """What the delivery gate and a session fence read of a session: its deadline, liveness
    and renewals."""

    def __init__(self, deadline_mono: float) -> None:
        self.deadline = deadline_mono
        self.live = True
        self.renewed = asyncio.Event()

    @property
    def deadline_mono(self) -> float:
        return self.deadline

    def fenced(self, now_mono: float) -> bool:
        return not self.live or now_mono >= self.deadline

    async def wait_renewed(self, timeout_seconds: float | None) -> None:
        try:
            async with asyncio.timeout(timeout_seconds):
                await self.renewed.wait()
        except TimeoutError:
            return

    def renew(self, deadline_mono: float) -> None:
        self.deadline = deadline_mono
        renewed, self.renewed = self.renewed, asyncio.Event()
        renewed.set()


class FakeSessionFence:
    """The session fence's behaviour over :class:`FakeSession` (pause, resume, gone)."""

    pauses = True

    def __init__(self, session: FakeSession) -> None:
        self.session = session
        self.checkpoint = HeldCheckpoint(1, 0, 0)

    @property
    def deadline_mono(self) -> float:
        return self.session.deadline if self.session.live else float("-inf")

    @property
    def gone(self) -> bool:
        return not self.session.live

    def remaining_seconds(self) -> float:
        return self.deadline_mono - time.monotonic()

    @property
    def sink_deadline(self) -> FakeSessionFence:
        return self

    def extend(self, sent_mono: float) -> float | None:
        return None

    async def wait_renewed(self, timeout_seconds: float | None) -> None:
        await self.session.wait_renewed(timeout_seconds)

    def stop_renewing(self) -> None:
        return

    def finish(self) -> None:
        return


def run_gate(rig: Rig, session: FakeSession, *holders: StreamHolder) -> asyncio.Task[None]:
    """The worker's delivery gate over ``session`` and ``holders`` (cancelled with the loop)."""
    return asyncio.get_running_loop().create_task(
        rig.ctx.gate.run(lambda: cast(Any, session), lambda: [h.delivery for h in holders])
    )


async def test_a_session_fence_pauses_delivery_and_a_renewal_resumes_it(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """Past the session's deadline nothing is written, reading stops and the holding does not
    end; when the session renews, delivery resumes with the next seq, and the checkpoint goes
    to the slot."""
    rig = make_rig(sim, tmp_path)
    session = FakeSession(time.monotonic() + 0.3)
    fenced_at = session.deadline
    fence = FakeSessionFence(session)
    holder = rig.holder("s10", fence=fence)
    run_gate(rig, session, holder)
    task = asyncio.create_task(holder.run())
    await asyncio.sleep(0.6)
    assert holder.is_active and not task.done()
    writes = [e for e in rig.journal.entries if e[0] == "write"]
    assert writes and all(started < fenced_at for *_, started in writes)
    resumed_at = time.monotonic()
    session.renew(resumed_at + 100.0)
    await until(lambda: any(e[0] == "write" and e[3] >= resumed_at for e in rig.journal.entries))
    holder.request_end(EndReason.SHUTDOWN)
    await asyncio.wait_for(task, 10)
    written = rig.journal.written()
    assert written == list(range(1, len(written) + 1)), "no gap, no repeat across the pause"
    assert fence.checkpoint.last_seq == holder.acked_seq == written[-1]


async def test_a_lost_session_ends_a_paused_holder_without_a_write(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """The session is gone while delivery is paused: the holder ends LOST, releases nothing."""
    rig = make_rig(sim, tmp_path)
    session = FakeSession(time.monotonic() + 0.2)
    holder = rig.holder("s11", fence=FakeSessionFence(session))
    run_gate(rig, session, holder)
    task = asyncio.create_task(holder.run())
    await asyncio.sleep(0.4)
    writes_before = len(rig.journal.entries)
    session.live = False
    session.renew(float("-inf"))
    holder.request_end(EndReason.LOST)
    await asyncio.wait_for(task, 10)
    assert len(rig.journal.entries) == writes_before
    assert rig.events() == ["lost"]


async def test_a_shed_stream_is_handed_off_for_a_worker_below_its_share(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """Shedding marks its handoff (a drain does not): only a worker below its share should take
    it, or the move would not reduce the imbalance."""
    rig = make_rig(sim, tmp_path)
    shed, drained = rig.holder("s12"), rig.holder("s13")
    for holder, reason in ((shed, EndReason.SHED), (drained, EndReason.SHUTDOWN)):
        task = asyncio.create_task(holder.run())
        await until(lambda h=holder: h.acked_seq >= 3)
        holder.request_end(reason)
        await asyncio.wait_for(task, 10)
    handoffs = cast(RecordingHandoffs, rig.ctx.handoffs)
    assert handoffs.rebalance == [True, False]


class AnswerLostStore(RecordingStore):
    """A release whose answer is lost, then the retry finds another worker's epoch:
    ``landed`` False, the lease was taken (LeaseLost); True, the first attempt had landed
    and the stream was acquired since (the store answers the stream as it is now)."""

    def __init__(self, journal: Journal, *, landed: bool = False) -> None:
        super().__init__(journal)
        self.release_calls: list[float] = []
        self.landed = landed

    def release(self, stream_id: str, owner: str, epoch: int, **kwargs: Any) -> Stream:
        self.release_calls.append(time.monotonic())
        if len(self.release_calls) == 1:
            raise StoreError("DynamoDB update_item failed: ReadTimeoutError")
        if self.landed:
            return Stream(stream_id, DesiredState.STARTED, "", "w2", 0, 5, epoch + 1, 2)
        raise LeaseLost(stream_id, epoch, "another worker holds it")


async def shed_with_the_answer_lost(
    sim: UpstreamSimulator, tmp_path: Path, *, landed: bool
) -> tuple[Journal, AnswerLostStore, LeaseEvent]:
    """Shed a delivering holder whose first release gets no answer (see
    :class:`AnswerLostStore`); returns the journal, the store and the holding's last event."""
    journal = Journal()
    rig = make_rig(sim, tmp_path, RecordingSink(journal))
    store = AnswerLostStore(journal, landed=landed)
    rig.ctx.store = cast(Any, store)
    holder = rig.holder("s1")
    task = asyncio.create_task(holder.run())
    await until(lambda: holder.acked_seq >= 5)
    holder.request_end(EndReason.SHED)
    await asyncio.wait_for(task, 10)
    rig.ctx.events.close()
    events, _ = read_jsonl([rig.events_path], LeaseEvent.from_dict)
    return journal, store, events[-1]


async def test_a_release_that_finds_the_lease_gone_ends_the_holding_when_it_was_sent(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """A shed holder stops delivering, then releases; the release lands but its answer is
    lost, and the retry finds another worker's epoch. The lost event says the holding
    delivered nothing after the first release was sent (its last write came before), not
    until the moment the retry learned it: that is what another worker's acquisition must
    follow, however late this one found out."""
    journal, store, lost = await shed_with_the_answer_lost(sim, tmp_path, landed=False)
    assert lost.event == "lost"
    first_release, retry = store.release_calls
    assert lost.deadline_mono is not None
    assert lost.deadline_mono <= first_release < retry <= lost.mono
    last_write = max(e[3] for e in journal.entries if e[0] == "write")
    assert last_write <= lost.deadline_mono


async def test_a_retried_release_that_had_landed_is_a_handover_not_a_loss(
    sim: UpstreamSimulator, tmp_path: Path
) -> None:
    """The first release landed (its answer lost) and another worker acquired the stream
    before the retry, which learns so from the store: the holding ends released, as of the
    first attempt, and sends no handoff for a stream someone already holds."""
    journal, store, released = await shed_with_the_answer_lost(sim, tmp_path, landed=True)
    assert released.event == "released"
    first_release, retry = store.release_calls
    assert released.deadline_mono is not None
    assert released.deadline_mono <= first_release < retry <= released.mono
    assert not [e for e in journal.entries if e[0] == "handoff"]
