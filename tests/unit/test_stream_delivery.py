"""One holding's delivery without sockets: batches to a scripted sink, one in the sink and the
rest waiting, reading paused past the bound, refused batches retried, the fence obeyed, and the
two ways a holding ends."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
from websockets.frames import TEXT, Frame

from streamlease.errors import SinkDeadlinePassed, SinkError
from streamlease.telemetry import WorkerMetric
from worker.fencing.fence import DeliveryGate
from worker.fencing.slots import HeldCheckpoint
from worker.metrics import WorkerMetrics
from worker.sinks import BatchHeader, SinkBatch
from worker.stream import delivery as delivery_module
from worker.stream.delivery import MAX_WAITING_RECORDS, Delivery
from worker.stream.progress import ProgressWatch
from worker.stream.sequence import Sequencer

NEVER = float("inf")


def frames(*seqs: int) -> list[Frame]:
    return [Frame(TEXT, bytearray(b'{"seq":%d}' % n)) for n in seqs]


class Sink:
    """Keeps what it is given; the test settles each batch."""

    def __init__(self) -> None:
        self.batches: list[SinkBatch] = []

    def submit(self, batch: SinkBatch) -> None:
        self.batches.append(batch)

    async def close(self) -> None:
        return

    def store(self, index: int = -1) -> None:
        batch = self.batches[index]
        batch.owner.batch_stored(batch)

    def refuse(self, error: SinkError, index: int = -1) -> None:
        batch = self.batches[index]
        batch.owner.batch_failed(batch, error)

    def seqs(self, index: int = -1) -> list[int]:
        return [r.seq for r in self.batches[index].records]


class Fence:
    """A deadline the test moves; ``pauses``: a session's (else a per-stream lease's)."""

    def __init__(self, *, pauses: bool = True, remaining: float = NEVER) -> None:
        self.pauses = pauses
        self.remaining = remaining
        self.checkpoint = HeldCheckpoint(3, 0, 0)

    @property
    def deadline_mono(self) -> float:
        return time.monotonic() + self.remaining

    @property
    def sink_deadline(self) -> Fence:
        return self

    def remaining_seconds(self) -> float:
        return self.remaining


class Reading:
    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False


class Rig:
    def __init__(self, **fence: Any) -> None:
        self.sink = Sink()
        self.fence = Fence(**fence)
        self.reading = Reading()
        self.metrics = WorkerMetrics()
        self.gate = DeliveryGate()
        self.fenced: list[bool] = []
        self.progress = ProgressWatch(Sequencer(("seq",), 0), 60)
        self.delivery = Delivery(
            BatchHeader("s", 3, "w"),
            self.progress,
            self.fence,  # type: ignore[arg-type]
            sink=self.sink,
            metrics=self.metrics,
            gate=self.gate,
            reading=self.reading,
            on_fenced=lambda: self.fenced.append(True),
            acked_seq=0,
        )


async def test_one_batch_in_the_sink_and_what_comes_meanwhile_goes_next() -> None:
    """A batch goes to the sink at once; what arrives while it is there waits and goes as one
    batch when the sink acknowledges; the checkpoint moves only on acknowledgements."""
    rig = Rig()
    rig.delivery.messages_received(frames(1, 2))
    rig.delivery.messages_received(frames(3))
    rig.delivery.messages_received(frames(4, 5))
    assert [rig.sink.seqs(i) for i in range(len(rig.sink.batches))] == [[1, 2]]
    assert rig.delivery.acked_seq == 0
    rig.sink.store()
    assert rig.sink.seqs() == [3, 4, 5]
    assert (rig.delivery.acked_seq, rig.fence.checkpoint.last_seq) == (2, 2)
    rig.sink.store()
    assert (rig.delivery.acked_seq, rig.progress.delivered) == (5, 5)
    assert rig.metrics.total(WorkerMetric.MESSAGES_RECEIVED) == 5
    assert rig.sink.batches[0].header is rig.sink.batches[1].header  # built once per holding


async def test_reading_pauses_past_the_bound_and_resumes_when_the_waiting_go() -> None:
    rig = Rig()
    rig.delivery.messages_received(frames(1))
    rig.delivery.messages_received(frames(*range(2, 2 + MAX_WAITING_RECORDS)))
    assert rig.reading.paused
    rig.sink.store()
    assert not rig.reading.paused
    assert len(rig.sink.seqs()) == MAX_WAITING_RECORDS


async def test_a_refused_batch_is_retried_after_a_backoff_with_only_what_was_not_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sink stored 1 of 3: 2 and 3 go again (before what came since), after a backoff;
    the stream counts the refusal until a batch is stored."""
    monkeypatch.setattr(delivery_module, "SINK_RETRY_BASE_SECONDS", 0.01)
    rig = Rig()
    rig.delivery.messages_received(frames(1, 2, 3))
    first = rig.sink.batches[0]
    rig.delivery.messages_received(frames(4))
    rig.sink.refuse(SinkError("throttled", unsent=first.records[1:]))
    assert len(rig.sink.batches) == 1  # nothing sent at once
    assert rig.progress.sink_failures == 1 and "throttled" in (rig.progress.sink_error or "")
    await asyncio.sleep(0.05)
    assert rig.sink.seqs() == [2, 3, 4]
    assert rig.metrics.total(WorkerMetric.SINK_ERRORS) == 1
    rig.sink.store()
    assert (rig.delivery.acked_seq, rig.progress.sink_failures) == (4, 0)


async def test_past_a_sessions_deadline_nothing_is_sent_until_the_gate_resumes_it() -> None:
    """Reading stops and the delivery waits in the gate; on the renewal what waited goes,
    stamped with the time delivery resumed, and reading starts again."""
    rig = Rig(remaining=-1.0)
    rig.delivery.messages_received(frames(1, 2))
    assert rig.sink.batches == []
    assert rig.reading.paused and rig.gate.paused == 1
    before = time.time_ns() // 1_000_000
    rig.fence.remaining = NEVER
    rig.delivery.resume_after_fence()
    assert rig.sink.seqs() == [1, 2]
    assert all(r.received_at_ms >= before for r in rig.sink.batches[0].records)
    assert not rig.reading.paused


async def test_a_batch_the_sink_found_past_the_deadline_waits_for_the_renewal() -> None:
    rig = Rig()
    rig.delivery.messages_received(frames(1))
    rig.fence.remaining = -1.0
    batch = rig.sink.batches[0]
    rig.sink.refuse(SinkDeadlinePassed("late", unsent=batch.records))
    assert rig.reading.paused and rig.gate.paused == 1
    assert rig.progress.sink_failures == 0  # not the sink's failure
    rig.fence.remaining = NEVER
    rig.delivery.resume_after_fence()
    assert rig.sink.seqs() == [1]


async def test_past_a_per_stream_leases_deadline_the_holding_ends() -> None:
    rig = Rig(pauses=False, remaining=-1.0)
    rig.delivery.messages_received(frames(1))
    assert rig.fenced == [True]
    assert rig.sink.batches == []


async def test_an_abrupt_end_submits_nothing_more() -> None:
    """Lost: a batch in the sink cannot be recalled, but nothing follows it."""
    rig = Rig()
    rig.delivery.messages_received(frames(1))
    rig.delivery.messages_received(frames(2))
    rig.delivery.stop(graceful=False)
    rig.sink.store()
    rig.delivery.messages_received(frames(3))
    assert len(rig.sink.batches) == 1
    assert rig.reading.paused


async def test_a_graceful_end_delivers_what_was_received_once_without_retries() -> None:
    """Stop, shed, drain: reading stops; the batch in the sink, then what waited, and no retry
    of a refused one."""
    rig = Rig()
    rig.delivery.messages_received(frames(1))
    rig.delivery.messages_received(frames(2, 3))
    rig.delivery.stop(graceful=True)
    drained = asyncio.create_task(rig.delivery.drain(5.0))
    await asyncio.sleep(0)
    rig.sink.store()
    assert rig.sink.seqs() == [2, 3]
    rig.sink.refuse(SinkError("disk on fire"))
    await asyncio.wait_for(drained, 1)
    assert len(rig.sink.batches) == 2
    assert rig.delivery.acked_seq == 1


async def test_a_drain_that_gives_up_submits_nothing_after_it() -> None:
    """The drain's limit passes with a batch still in the sink: when the sink acknowledges it
    later, what waited behind it is not submitted (the lease may be released by then)."""
    rig = Rig()
    rig.delivery.messages_received(frames(1))
    rig.delivery.messages_received(frames(2, 3))
    rig.delivery.stop(graceful=True)
    await rig.delivery.drain(0.01)
    rig.sink.store()
    assert len(rig.sink.batches) == 1
    assert rig.delivery.acked_seq == 1


async def test_settling_closes_the_batch_in_the_sink_to_sends_not_begun() -> None:
    """Before the lease is given up, the batch still in the sink gets a deadline that has
    passed for good (a sink looks at it right before it sends), and the release waits until
    the sink settles it."""
    rig = Rig()
    rig.delivery.messages_received(frames(1))
    rig.delivery.stop(graceful=True)
    await rig.delivery.drain(0.01)
    batch = rig.sink.batches[0]
    settling = asyncio.create_task(rig.delivery.settle(5.0))
    await asyncio.sleep(0)
    assert batch.deadline.remaining_seconds() == -math.inf
    assert not settling.done()
    rig.sink.refuse(SinkDeadlinePassed("fencing deadline passed", unsent=batch.records))
    assert await asyncio.wait_for(settling, 1) is True
    assert rig.sink.batches == [batch]


async def test_settling_gives_up_after_its_limit_and_says_so() -> None:
    """A sink that never settles holds the release back only for the limit given."""
    rig = Rig()
    rig.delivery.messages_received(frames(1))
    rig.delivery.stop(graceful=False)
    assert await rig.delivery.settle(0.01) is False
    assert await rig.delivery.wait_settled(0.01) is False
    rig.sink.store()
    assert await rig.delivery.wait_settled(0.01) is True


async def test_settling_with_nothing_in_the_sink_returns_at_once() -> None:
    """Nothing in the sink: nothing to wait for, and nothing is submitted afterwards."""
    rig = Rig()
    rig.delivery.stop(graceful=True)
    assert await rig.delivery.settle(0.0) is True
    rig.delivery.messages_received(frames(1))
    assert rig.sink.batches == []


async def test_nothing_is_taken_in_once_the_holding_ends() -> None:
    """A closing connection still reads (to see the upstream's close): what comes then is not
    sent — it is past the checkpoint the release writes, so it would be stored and then sent
    again by the next owner."""
    rig = Rig()
    rig.delivery.stop(graceful=True)
    rig.delivery.messages_received(frames(1, 2))
    await rig.delivery.drain(1.0)
    assert rig.sink.batches == []
    assert rig.progress.received == 0


async def test_gaps_and_undeliverable_frames_are_counted_once_per_batch() -> None:
    rig = Rig()
    rig.delivery.messages_received([*frames(1, 3), Frame(TEXT, bytearray(b"junk"))])
    assert rig.metrics.total(WorkerMetric.SEQ_GAPS) == 1
    assert rig.metrics.total(WorkerMetric.MALFORMED_FRAMES) == 1
    rig.delivery.messages_received(frames(4))
    assert rig.metrics.total(WorkerMetric.SEQ_GAPS) == 1
    assert rig.progress.received == 4


async def test_nothing_is_taken_in_once_the_batch_in_the_sink_was_settled() -> None:
    """Settling (before a release) ends the holding's intake too, whatever ended it: a frame
    that arrives afterwards is never submitted after the lease is given up."""
    rig = Rig()
    assert await rig.delivery.settle(0.0) is True
    rig.delivery.messages_received(frames(1))
    assert rig.sink.batches == []
