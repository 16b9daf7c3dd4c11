"""UpstreamReader against the real upstream simulator over real sockets: resume, dedupe, gaps,
malformed frames, reconnect pacing and how each upstream outcome ends (or does not end) a stream."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import pytest

from local.upstream_sim import UpstreamSimulator, payload_for
from streamlease.errors import UpstreamRejected
from streamlease.settings import Settings
from worker.upstream import UpstreamEvent, UpstreamEventKind, UpstreamReader

SETTINGS = Settings(
    allow_insecure_ws=True,
    allow_loopback_upstreams=True,
    backoff_base_seconds=0.02,
    backoff_max_seconds=0.2,
    stable_seconds=2.0,
    connect_timeout_seconds=2.0,
    ping_interval_seconds=1.0,
    ping_timeout_seconds=1.0,
)


@pytest.fixture
async def sim() -> AsyncIterator[UpstreamSimulator]:
    async with UpstreamSimulator() as simulator:
        yield simulator


async def collect(reader: UpstreamReader, count: int, limit_seconds: float = 10.0) -> list[int]:
    """The first ``count`` seqs the reader delivers (fails the test after ``limit_seconds``)."""
    seqs: list[int] = []
    async with asyncio.timeout(limit_seconds):
        async for message in reader:
            seqs.append(message.seq)
            if len(seqs) == count:
                break
    return seqs


async def eventually(condition: Callable[[], bool], limit_seconds: float = 5.0) -> None:
    """Wait until ``condition()`` holds; fail after ``limit_seconds``."""
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_resumes_from_last_seq_plus_one_with_exact_replay(sim: UpstreamSimulator) -> None:
    """A reader at last_seq=41 asks for 42 and gets the simulator's exact payloads."""
    url = sim.url_for("s:1.a", rate=0)
    async with UpstreamReader("s:1.a", url, SETTINGS, last_seq=41) as reader:
        message = await anext(reader)
    body = json.loads(message.payload)
    assert message.seq == body["seq"] == 42
    assert body["data"] == payload_for("s:1.a", 42)
    assert sim.stats("s:1.a").from_seqs == [42]


async def test_reconnects_resume_where_delivery_stopped(sim: UpstreamSimulator) -> None:
    """Two drops mid-stream: every seq arrives exactly once, each connect asks for the next."""
    sim.set_fault("s", drop_after=5, times=2)
    async with UpstreamReader("s", sim.url_for("s", rate=0), SETTINGS) as reader:
        assert await collect(reader, 15) == list(range(1, 16))
    assert sim.stats("s").from_seqs == [1, 6, 11]
    assert reader.stats.retries == 2


async def test_an_overlapping_replay_is_deduplicated(sim: UpstreamSimulator) -> None:
    """An upstream that replays 3 seqs too many on each reconnect delivers no duplicate."""
    sim.set_fault("s", drop_after=5, replay_back=3, times=3)
    async with UpstreamReader("s", sim.url_for("s", rate=0), SETTINGS) as reader:
        assert await collect(reader, 12) == list(range(1, 13))
    assert reader.stats.duplicates == 6


async def test_skipped_seqs_are_counted_as_gaps(sim: UpstreamSimulator) -> None:
    """The upstream skips one seq after every 4: each skip is a gap of one, reported."""
    events: list[UpstreamEvent] = []
    url = sim.url_for("s", rate=0, gap_every=4)
    async with UpstreamReader("s", url, SETTINGS, on_event=events.append) as reader:
        seqs = await collect(reader, 12)
    assert seqs == [1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14]
    assert (reader.stats.gaps, reader.stats.missing) == (2, 2)
    assert [(e.seq, e.missing) for e in events if e.kind is UpstreamEventKind.GAP] == [
        (6, 1),
        (11, 1),
    ]


async def test_malformed_frames_are_counted_and_the_stream_goes_on(
    sim: UpstreamSimulator,
) -> None:
    """Garbage after every 2nd message: all messages arrive on the one connection."""
    url = sim.url_for("s", rate=0, garbage_every=2)
    async with UpstreamReader("s", url, SETTINGS) as reader:
        assert await collect(reader, 11) == list(range(1, 12))
    assert reader.stats.malformed == 5
    assert reader.stats.connects == 1


async def test_an_upstream_that_accepts_then_drops_is_not_hammered(sim: UpstreamSimulator) -> None:
    """Accept-then-abort at once: reconnects are paced by backoff (no tight loop)."""
    settings = Settings(
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        backoff_base_seconds=0.05,
        backoff_max_seconds=0.4,
        stable_seconds=5.0,
    )
    events: list[UpstreamEvent] = []
    reader = UpstreamReader("s", sim.url_for("s", drop_after=0), settings, on_event=events.append)
    consumer = asyncio.create_task(collect(reader, 1, limit_seconds=30))
    await asyncio.sleep(1.5)
    await reader.close()
    await consumer
    attempts = sim.attempts("s")
    # Backoff expects about 8 attempts in 1.5 s; an immediate reconnect would make hundreds.
    assert 3 <= attempts <= 25
    retries = [e for e in events if e.kind is UpstreamEventKind.RETRYING]
    assert retries and all(e.close_code == 1006 for e in retries)
    assert [e.attempt for e in retries] == list(range(1, len(retries) + 1))


async def test_403_at_handshake_is_fatal_and_reported(sim: UpstreamSimulator) -> None:
    """A refused handshake raises UpstreamRejected, the hook sees it, nobody retries."""
    events: list[UpstreamEvent] = []
    url = sim.url_for("s", reject=403)
    reader = UpstreamReader("s", url, SETTINGS, on_event=events.append)
    with pytest.raises(UpstreamRejected, match="HTTP 403"):
        await anext(reader)
    assert [(e.kind, e.status) for e in events] == [(UpstreamEventKind.REJECTED, 403)]
    await asyncio.sleep(0.2)
    assert sim.attempts("s") == 1


async def test_503_at_handshake_is_retried(sim: UpstreamSimulator) -> None:
    """Two 503 answers, then the upstream recovers and the stream flows."""
    sim.set_fault("s", reject=503, times=2)
    events: list[UpstreamEvent] = []
    async with UpstreamReader("s", sim.url_for("s"), SETTINGS, on_event=events.append) as reader:
        assert await collect(reader, 1) == [1]
    stats = sim.stats("s")
    assert (stats.rejected, stats.accepted) == (2, 1)
    statuses = [e.status for e in events if e.kind is UpstreamEventKind.RETRYING]
    assert statuses == [503, 503]


async def test_normal_close_from_upstream_ends_the_stream(sim: UpstreamSimulator) -> None:
    """After close 1000 the iteration stops and no reconnect is made."""
    url = sim.url_for("s", rate=0, close_code=1000, close_after=3)
    async with UpstreamReader("s", url, SETTINGS) as reader:
        async with asyncio.timeout(10):
            assert [m.seq async for m in reader] == [1, 2, 3]
    assert reader.upstream_ended
    await asyncio.sleep(0.2)
    assert sim.attempts("s") == 1


@pytest.mark.parametrize("code", [1001, 1011, 1012, 1013])
async def test_restart_and_error_closes_are_retried(sim: UpstreamSimulator, code: int) -> None:
    """Going away, service restart, try again later, internal error: reconnect and resume."""
    sim.set_fault("s", close_code=code, close_after=2, times=1)
    events: list[UpstreamEvent] = []
    url = sim.url_for("s", rate=0)
    async with UpstreamReader("s", url, SETTINGS, on_event=events.append) as reader:
        assert await collect(reader, 4) == [1, 2, 3, 4]
    assert sim.stats("s").from_seqs == [1, 3]
    assert [e.close_code for e in events if e.kind is UpstreamEventKind.RETRYING] == [code]


@pytest.mark.parametrize("code", [1000, 1001])
async def test_the_owners_close_code_reaches_the_upstream(
    sim: UpstreamSimulator, code: int
) -> None:
    """close(1000) on stop, close(1001) on shutdown or handoff: the upstream sees which."""
    async with UpstreamReader("s", sim.url_for("s", rate=50), SETTINGS) as reader:
        await anext(reader)
        await reader.close(code)
    await eventually(lambda: sim.stats("s").close_codes_received == [code])


async def test_a_cancelled_owner_leaves_no_socket_open(sim: UpstreamSimulator) -> None:
    """Cancellation propagates and the connection is closed as going away (1001)."""

    async def hold() -> None:
        async with UpstreamReader("s", sim.url_for("s", rate=50), SETTINGS) as reader:
            async for _ in reader:
                pass

    task = asyncio.create_task(hold())
    await eventually(lambda: sim.stats("s").open == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: sim.stats("s").open == 0)
    assert sim.stats("s").close_codes_received == [1001]


async def test_reported_errors_never_contain_the_query_string(sim: UpstreamSimulator) -> None:
    """Credentials in the URL's query never reach last_error, logs or exceptions."""
    sim.set_fault("s", reject=503, times=1)
    sim.set_fault("t", reject=403)
    events: list[UpstreamEvent] = []
    url = sim.url_for("s", api_key="s3cr3t", drop_after=1)
    reader = UpstreamReader("s", url, SETTINGS, on_event=events.append)
    await collect(reader, 2)
    await reader.close()
    with pytest.raises(UpstreamRejected) as rejected:
        await anext(UpstreamReader("t", sim.url_for("t", api_key="s3cr3t"), SETTINGS))
    messages = [e.error for e in events if e.error] + [str(rejected.value)]
    assert len(messages) >= 2
    assert not any("s3cr3t" in m or "api_key" in m for m in messages)


async def test_a_batch_is_what_has_arrived_and_never_waits_for_more(
    sim: UpstreamSimulator,
) -> None:
    """``next_batch``: the first message waited for, then only those already received, at
    most ``limit``, in order and without a gap between batches."""
    fast = UpstreamReader("fast", sim.url_for("fast", rate=0), SETTINGS)
    slow = UpstreamReader("slow", sim.url_for("slow", rate=4), SETTINGS)
    async with fast, slow:
        seqs: list[int] = []
        sizes: list[int] = []
        async with asyncio.timeout(10):
            while len(seqs) < 2000:
                batch = await fast.next_batch(300)
                sizes.append(len(batch))
                seqs += [m.seq for m in batch]
        assert seqs == list(range(1, len(seqs) + 1))
        assert max(sizes) <= 300 and max(sizes) > 1  # a flat-out feed fills batches

        first = await asyncio.wait_for(slow.next_batch(300), 5)
        second = await asyncio.wait_for(slow.next_batch(300), 5)
        assert [[m.seq for m in b] for b in (first, second)] == [[1], [2]]  # as they come


async def test_a_skipped_frame_does_not_hold_a_batch_back(sim: UpstreamSimulator) -> None:
    """Frames that are not messages (malformed, replayed) behind the first are dropped without
    waiting for the next real message."""
    url = sim.url_for("junk", rate=5, garbage_every=1)
    reader = UpstreamReader("junk", url, SETTINGS)
    async with reader:
        batch = await asyncio.wait_for(reader.next_batch(100), 5)
        again = await asyncio.wait_for(reader.next_batch(100), 5)
    # Message 1 and the junk behind it came together; waiting on would have added message 2.
    assert [[m.seq for m in b] for b in (batch, again)] == [[1], [2]]
    assert reader.stats.malformed >= 1


async def test_a_batch_ends_the_iteration_empty(sim: UpstreamSimulator) -> None:
    """After the upstream finished the stream (close 1000) ``next_batch`` returns nothing."""
    reader = UpstreamReader(
        "done", sim.url_for("done", rate=0, close_code=1000, close_after=3), SETTINGS
    )
    async with reader:
        got: list[int] = []
        async with asyncio.timeout(5):
            while batch := await reader.next_batch(10):
                got += [m.seq for m in batch]
    assert got == [1, 2, 3]
    assert reader.upstream_ended
