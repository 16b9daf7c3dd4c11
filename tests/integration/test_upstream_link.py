"""A stream's upstream link against the real upstream simulator over real sockets: resume,
dedupe, gaps, malformed frames, batches, reconnect pacing and how each upstream outcome ends
(or does not end) a stream."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import pytest
from upstream_client import LinkRun

from local.upstream_sim import UpstreamSimulator, payload_for
from streamlease.settings import Settings
from worker.stream.keepalive import Keepalive
from worker.stream.link import UpstreamEventKind

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

pytestmark = pytest.mark.usefixtures("each_upstream_library")


@pytest.fixture
async def sim() -> AsyncIterator[UpstreamSimulator]:
    async with UpstreamSimulator() as simulator:
        yield simulator


async def eventually(condition: Callable[[], bool], limit_seconds: float = 5.0) -> None:
    """Wait until ``condition()`` holds; fail after ``limit_seconds``."""
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_resumes_from_last_seq_plus_one_with_exact_replay(sim: UpstreamSimulator) -> None:
    """A link at last_seq=41 asks for 42 and gets the simulator's exact payloads."""
    url = sim.url_for("s:1.a", rate=0)
    async with LinkRun("s:1.a", url, SETTINGS, last_seq=41) as run:
        (message,) = await run.take(1)
    body = json.loads(message.payload)
    assert message.seq == body["seq"] == 42
    assert body["data"] == payload_for("s:1.a", 42)
    assert sim.stats("s:1.a").from_seqs[0] == 42


async def test_reconnects_resume_where_delivery_stopped(sim: UpstreamSimulator) -> None:
    """Two drops mid-stream: every seq arrives exactly once, each connect asks for the next."""
    sim.set_fault("s", drop_after=5, times=2)
    async with LinkRun("s", sim.url_for("s", rate=0), SETTINGS) as run:
        await run.take(15)
    assert run.seqs[:15] == list(range(1, 16))
    assert sim.stats("s").from_seqs == [1, 6, 11]
    assert run.link.retries == 2


async def test_an_overlapping_replay_is_deduplicated(sim: UpstreamSimulator) -> None:
    """An upstream that replays 3 seqs too many on each reconnect delivers no duplicate."""
    sim.set_fault("s", drop_after=5, replay_back=3, times=3)
    async with LinkRun("s", sim.url_for("s", rate=0), SETTINGS) as run:
        await run.take(12)
    assert run.seqs[:12] == list(range(1, 13))
    assert run.sequencer.duplicates == 6


async def test_skipped_seqs_are_counted_as_gaps(sim: UpstreamSimulator) -> None:
    """The upstream skips one seq after every 4: each skip is a gap of one."""
    url = sim.url_for("s", rate=0, gap_every=4)
    async with LinkRun("s", url, SETTINGS) as run:
        await run.take(12)
    assert run.seqs[:12] == [1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14]
    assert run.sequencer.gaps >= 2 and run.sequencer.missing == run.sequencer.gaps


async def test_malformed_frames_are_counted_and_the_stream_goes_on(
    sim: UpstreamSimulator,
) -> None:
    """Garbage after every 2nd message: all messages arrive on the one connection."""
    url = sim.url_for("s", rate=0, garbage_every=2)
    async with LinkRun("s", url, SETTINGS) as run:
        await run.take(11)
    assert run.seqs[:11] == list(range(1, 12))
    assert run.sequencer.malformed >= 5
    assert run.link.connects == 1


async def test_an_upstream_that_accepts_then_drops_is_not_hammered(sim: UpstreamSimulator) -> None:
    """Accept-then-abort at once: reconnects are paced by backoff (no tight loop)."""
    settings = Settings(
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        backoff_base_seconds=0.05,
        backoff_max_seconds=0.4,
        stable_seconds=5.0,
    )
    async with LinkRun("s", sim.url_for("s", drop_after=0), settings) as run:
        await asyncio.sleep(1.5)
    attempts = sim.attempts("s")
    # Backoff expects about 8 attempts in 1.5 s; an immediate reconnect would make hundreds.
    assert 3 <= attempts <= 25
    retries = run.kinds(UpstreamEventKind.RETRYING)
    assert retries and all(e.close_code == 1006 for e in retries)
    assert [e.attempt for e in retries] == list(range(1, len(retries) + 1))


async def test_403_at_handshake_is_reported_and_the_stream_parked(sim: UpstreamSimulator) -> None:
    """A refused handshake is a rejection: reported with its status, no quick retry (the
    next attempt only after the longest backoff)."""
    settings = Settings(
        allow_insecure_ws=True, allow_loopback_upstreams=True, backoff_max_seconds=30.0
    )
    async with LinkRun("s", sim.url_for("s", reject=403), settings) as run:
        rejected = await run.event(UpstreamEventKind.REJECTED)
        await asyncio.sleep(0.2)
    assert (rejected.status, rejected.delay_seconds) == (403, 30.0)
    assert "HTTP 403" in rejected.error
    assert sim.attempts("s") == 1


async def test_503_at_handshake_is_retried(sim: UpstreamSimulator) -> None:
    """Two 503 answers, then the upstream recovers and the stream flows."""
    sim.set_fault("s", reject=503, times=2)
    async with LinkRun("s", sim.url_for("s"), SETTINGS) as run:
        await run.take(1)
    stats = sim.stats("s")
    assert (stats.rejected, stats.accepted) == (2, 1)
    assert [e.status for e in run.kinds(UpstreamEventKind.RETRYING)] == [503, 503]


async def test_normal_close_from_upstream_ends_the_stream(sim: UpstreamSimulator) -> None:
    """After close 1000 the link stops and no reconnect is made."""
    url = sim.url_for("s", rate=0, close_code=1000, close_after=3)
    async with LinkRun("s", url, SETTINGS) as run:
        await run.ended()
    assert run.seqs == [1, 2, 3]
    assert run.link.upstream_ended
    await asyncio.sleep(0.2)
    assert sim.attempts("s") == 1


@pytest.mark.parametrize("code", [1001, 1011, 1012, 1013])
async def test_restart_and_error_closes_are_retried(sim: UpstreamSimulator, code: int) -> None:
    """Going away, service restart, try again later, internal error: reconnect and resume."""
    sim.set_fault("s", close_code=code, close_after=2, times=1)
    async with LinkRun("s", sim.url_for("s", rate=0), SETTINGS) as run:
        await run.take(4)
    assert run.seqs[:4] == [1, 2, 3, 4]
    assert sim.stats("s").from_seqs == [1, 3]
    assert [e.close_code for e in run.kinds(UpstreamEventKind.RETRYING)] == [code]


@pytest.mark.parametrize("code", [1000, 1001])
async def test_the_owners_close_code_reaches_the_upstream(
    sim: UpstreamSimulator, code: int
) -> None:
    """close(1000) on stop, close(1001) on shutdown or handoff: the upstream sees which."""
    async with LinkRun("s", sim.url_for("s", rate=50), SETTINGS) as run:
        await run.take(1)
        await run.link.close(code)
    await eventually(lambda: sim.stats("s").close_codes_received == [code])


async def test_an_owner_that_fails_closes_as_going_away(sim: UpstreamSimulator) -> None:
    """Leaving with an error (the owner failed or was cancelled) closes with 1001."""
    with pytest.raises(RuntimeError):
        async with LinkRun("s", sim.url_for("s", rate=50), SETTINGS) as run:
            await run.take(1)
            raise RuntimeError("owner failed")
    await eventually(lambda: sim.stats("s").open == 0)
    assert sim.stats("s").close_codes_received == [1001]


async def test_reported_errors_never_contain_the_query_string(sim: UpstreamSimulator) -> None:
    """Credentials in the URL's query never reach an event's text (last_error, logs)."""
    sim.set_fault("s", reject=503, times=1)
    sim.set_fault("t", reject=403)
    url = sim.url_for("s", api_key="s3cr3t", drop_after=1)
    async with LinkRun("s", url, SETTINGS) as run:
        await run.take(2)
    async with LinkRun("t", sim.url_for("t", api_key="s3cr3t"), SETTINGS) as refused:
        await refused.event(UpstreamEventKind.REJECTED)
    messages = [e.error for e in run.events + refused.events if e.error]
    assert len(messages) >= 2
    assert not any("s3cr3t" in m or "api_key" in m for m in messages)


async def test_a_batch_is_what_one_read_completed(sim: UpstreamSimulator) -> None:
    """A flat-out feed arrives in batches of many messages, in order with no gap between
    batches; a slow one message by message, each as it comes."""
    async with LinkRun("fast", sim.url_for("fast", rate=0), SETTINGS) as fast:
        await fast.take(2000)
    assert fast.seqs[:2000] == list(range(1, 2001))
    assert max(fast.batches) > 1
    async with LinkRun("slow", sim.url_for("slow", rate=4), SETTINGS) as slow:
        await slow.take(3)
    assert slow.batches[:3] == [1, 1, 1]


async def test_a_silent_connection_is_kept_alive_by_the_shared_keepalive(
    sim: UpstreamSimulator,
) -> None:
    """A feed that goes quiet (``until_seq``) but answers pings stays connected: it is pinged
    once per silent interval, and its pongs keep it."""
    keepalive = Keepalive(SETTINGS.ping_interval_seconds, SETTINGS.ping_timeout_seconds)
    async with asyncio.TaskGroup() as tasks:
        pings = tasks.create_task(keepalive.run())
        url = sim.url_for("quiet", rate=0, until_seq=3)
        async with LinkRun("quiet", url, SETTINGS, keepalive=keepalive) as run:
            await run.take(3)
            await asyncio.sleep(3.5)
            assert len(keepalive) == 1
        pings.cancel()
    assert run.link.connects == 1 and run.link.retries == 0
    assert sim.attempts("quiet") == 1
