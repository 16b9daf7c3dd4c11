"""UpstreamReader's own logic against a scripted connection (no sockets): order, dedupe, gaps,
malformed frames, backoff, outcomes and closing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK, InvalidStatus
from websockets.frames import Close
from websockets.http11 import Response

from streamlease.errors import UpstreamRejected, UrlRejected
from streamlease.rules import backoff_seconds
from streamlease.settings import Settings
from worker.upstream import UpstreamEvent, UpstreamEventKind, UpstreamReader

SETTINGS = Settings(
    allow_insecure_ws=True,
    backoff_base_seconds=0.001,
    backoff_max_seconds=0.004,
    stable_seconds=10.0,
)
URL = "ws://upstream.example/s"


def frame(seq: Any) -> bytes:
    return b'{"seq":%s,"data":"x"}' % str(seq).encode()


class FakeConnection:
    """Plays ``script`` (frames, or an exception to raise), then waits until closed."""

    def __init__(self, script: list[bytes | BaseException]) -> None:
        self.script = list(script)
        self.closed_with: int | None = None
        self._closed = asyncio.Event()
        self.transport = self

    async def recv(self, decode: bool = True) -> bytes:
        if self.script:
            item = self.script.pop(0)
            if isinstance(item, BaseException):
                raise item
            return item
        await self._closed.wait()
        code = self.closed_with or 1000
        raise ConnectionClosedOK(Close(code, ""), Close(code, ""), False)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed_with = code
        self._closed.set()

    def abort(self) -> None:
        self._closed.set()

    def is_closing(self) -> bool:
        return self._closed.is_set()

    def resume_reading(self) -> None:
        pass


@dataclass
class FakeUpstream:
    """Hands out one scripted outcome per connect: a FakeConnection or an exception."""

    outcomes: list[FakeConnection | BaseException]
    from_seqs: list[int] = field(default_factory=list)

    async def connect(self, url: str, settings: Settings, *, from_seq: int, **_: Any) -> Any:
        self.from_seqs.append(from_seq)
        outcome = self.outcomes.pop(0) if self.outcomes else ConnectionRefusedError(111, "x")
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def dropped() -> ConnectionClosedError:
    return ConnectionClosedError(None, None)


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeUpstream]:
    def install(*outcomes: FakeConnection | BaseException) -> FakeUpstream:
        fake = FakeUpstream(list(outcomes))
        monkeypatch.setattr("worker.upstream.reader.connect_upstream", fake.connect)
        return fake

    return install


async def take(reader: UpstreamReader, count: int) -> list[int]:
    seqs = []
    async for message in reader:
        seqs.append(message.seq)
        if len(seqs) == count:
            break
    return seqs


async def test_messages_arrive_in_order_with_raw_payload(upstream: Any) -> None:
    """Each message carries its seq, the frame bytes unchanged and a receive time."""
    upstream(FakeConnection([frame(1), frame(2)]))
    async with UpstreamReader("s", URL, SETTINGS) as reader:
        first = await anext(reader)
        second = await anext(reader)
    assert (first.seq, second.seq) == (1, 2)
    assert first.payload == frame(1)
    assert first.received_at_ms > 1_600_000_000_000


async def test_seqs_at_or_below_the_last_delivered_are_dropped(upstream: Any) -> None:
    """Replayed or repeated seqs never reach the owner twice; they are counted."""
    upstream(FakeConnection([frame(1), frame(2), frame(2), frame(1), frame(3)]))
    async with UpstreamReader("s", URL, SETTINGS) as reader:
        assert await take(reader, 3) == [1, 2, 3]
    assert reader.stats.duplicates == 2


async def test_starting_seq_comes_from_last_seq(upstream: Any) -> None:
    """A reader resumed at last_seq=7 asks for 8 and drops anything up to 7."""
    fake = upstream(FakeConnection([frame(6), frame(7), frame(8)]))
    async with UpstreamReader("s", URL, SETTINGS, last_seq=7) as reader:
        assert await take(reader, 1) == [8]
    assert fake.from_seqs == [8]


async def test_a_jump_in_seq_is_a_gap_counted_and_reported(upstream: Any) -> None:
    """seq 2 then 5: one gap of two missing seqs, and message 5 is still delivered."""
    upstream(FakeConnection([frame(1), frame(2), frame(5)]))
    events: list[UpstreamEvent] = []
    async with UpstreamReader("s", URL, SETTINGS, on_event=events.append) as reader:
        assert await take(reader, 3) == [1, 2, 5]
    assert (reader.stats.gaps, reader.stats.missing) == (1, 2)
    gaps = [e for e in events if e.kind is UpstreamEventKind.GAP]
    assert [(e.seq, e.missing) for e in gaps] == [(5, 2)]


async def test_malformed_frames_are_skipped_counted_and_not_fatal(upstream: Any) -> None:
    """Non-JSON, no seq, non-integer seq (string, bool, float), non-object: skipped."""
    bad = [b"nope", b'{"x":1}', frame('"3"'), frame("true"), frame(1.5), b"[1]", b"\xff\xfe"]
    upstream(FakeConnection([*bad, frame(1)]))
    events: list[UpstreamEvent] = []
    async with UpstreamReader("s", URL, SETTINGS, on_event=events.append) as reader:
        assert await take(reader, 1) == [1]
    assert reader.stats.malformed == len(bad)
    assert reader.stats.connects == 1
    assert sum(e.kind is UpstreamEventKind.MALFORMED for e in events) == len(bad)


@pytest.mark.parametrize("loads", ["orjson", "json"])
async def test_a_seq_beyond_the_bound_is_malformed_and_never_becomes_last_seq(
    upstream: Any, monkeypatch: pytest.MonkeyPatch, loads: str
) -> None:
    """2^63 (one above int64), 2^70 and a 40-digit seq are skipped as malformed, with the cause
    named, whether the JSON parser reads them as integers or as floats; the messages after them
    are delivered (a huge seq taken as last_seq would make every later one a duplicate)."""
    if loads == "json":
        monkeypatch.setattr("worker.upstream.reader._loads", json.loads)
    huge = [2**63, 2**70, 10**39 + 7, -1]
    upstream(FakeConnection([frame(1), *(frame(n) for n in huge), frame(2), frame(3)]))
    events: list[UpstreamEvent] = []
    async with UpstreamReader("s", URL, SETTINGS, on_event=events.append) as reader:
        assert await asyncio.wait_for(take(reader, 3), 5) == [1, 2, 3]
    assert reader.stats.malformed == len(huge)
    assert reader.last_seq == 3
    errors = [e.error for e in events if e.kind is UpstreamEventKind.MALFORMED]
    assert errors == ["frame seq is above 2^63-1"] * 3 + ["frame seq is negative"]


async def test_the_largest_seq_accepted_is_2_63_minus_1(upstream: Any) -> None:
    upstream(FakeConnection([frame(2**63 - 1)]))
    async with UpstreamReader("s", URL, SETTINGS) as reader:
        assert await take(reader, 1) == [2**63 - 1]


async def test_reconnect_resumes_after_the_last_delivered_seq(upstream: Any) -> None:
    """After a drop the next connect asks for last delivered + 1."""
    fake = upstream(
        FakeConnection([frame(1), frame(2), dropped()]), FakeConnection([frame(3), frame(4)])
    )
    async with UpstreamReader("s", URL, SETTINGS) as reader:
        assert await take(reader, 4) == [1, 2, 3, 4]
    assert fake.from_seqs == [1, 3]
    assert reader.stats.retries == 1


async def test_failed_connects_back_off_exponentially_with_full_jitter(upstream: Any) -> None:
    """Delays follow rules.backoff_seconds of the consecutive failure count (capped)."""
    upstream(*[ConnectionRefusedError(111, "refused")] * 4, FakeConnection([frame(1)]))
    events: list[UpstreamEvent] = []
    reader = UpstreamReader("s", URL, SETTINGS, on_event=events.append, rand=lambda: 0.5)
    async with reader:
        assert await take(reader, 1) == [1]
    delays = [e.delay_seconds for e in events if e.kind is UpstreamEventKind.RETRYING]
    assert delays == [backoff_seconds(n, 0.001, 0.004, 0.5) for n in range(4)]
    assert all("refused" in e.error for e in events if e.kind is UpstreamEventKind.RETRYING)


async def test_backoff_resets_only_after_a_connection_stayed_up_stable_seconds(
    upstream: Any,
) -> None:
    """Short-lived connections keep growing the backoff; one that lasted resets it."""
    now = [0.0]
    connections = [FakeConnection([frame(n), dropped()]) for n in range(1, 5)]
    upstream(*connections)
    events: list[UpstreamEvent] = []
    lifetimes = iter([1.0, 1.0, 11.0])  # stable_seconds is 10

    def on_event(event: UpstreamEvent) -> None:
        events.append(event)
        if event.kind is UpstreamEventKind.CONNECTED and event.attempt <= 3:
            now[0] += next(lifetimes)  # how long this connection will have lived

    reader = UpstreamReader("s", URL, SETTINGS, on_event=on_event, clock=lambda: now[0])
    async with reader:
        assert await take(reader, 4) == [1, 2, 3, 4]
    attempts = [e.attempt for e in events if e.kind is UpstreamEventKind.RETRYING]
    assert attempts == [1, 2, 1]


async def test_normal_close_from_upstream_ends_the_iteration(upstream: Any) -> None:
    """The upstream said the stream is over (1000): no reconnect, the reason is kept."""
    ended = ConnectionClosedOK(Close(1000, ""), Close(1000, ""), True)
    fake = upstream(FakeConnection([frame(1), ended]))
    events: list[UpstreamEvent] = []
    async with UpstreamReader("s", URL, SETTINGS, on_event=events.append) as reader:
        assert [m.seq async for m in reader] == [1]
    assert reader.upstream_ended
    assert reader.end_reason is not None and "1000" in reader.end_reason
    assert events[-1].kind is UpstreamEventKind.ENDED
    assert fake.from_seqs == [1]


async def test_going_away_from_upstream_reconnects_and_resumes(upstream: Any) -> None:
    """1001 (a server restarting) is not the end of the stream: reconnect from the next seq."""
    going = ConnectionClosedOK(Close(1001, ""), Close(1001, ""), True)
    fake = upstream(FakeConnection([frame(1), going]), FakeConnection([frame(2)]))
    events: list[UpstreamEvent] = []
    async with UpstreamReader("s", URL, SETTINGS, on_event=events.append) as reader:
        assert await take(reader, 2) == [1, 2]
    assert not reader.upstream_ended
    assert fake.from_seqs == [1, 2]
    assert [e.close_code for e in events if e.kind is UpstreamEventKind.RETRYING] == [1001]


async def test_4xx_at_handshake_raises_upstream_rejected_without_retry(upstream: Any) -> None:
    """HTTP 403: fatal, reported, and the reader is finished."""
    fake = upstream(InvalidStatus(Response(403, "Forbidden", Headers(), b"")))
    events: list[UpstreamEvent] = []
    reader = UpstreamReader("s", URL, SETTINGS, on_event=events.append)
    with pytest.raises(UpstreamRejected, match="403"):
        await anext(reader)
    assert [e.kind for e in events] == [UpstreamEventKind.REJECTED]
    assert events[0].status == 403
    assert fake.from_seqs == [1]
    with pytest.raises(StopAsyncIteration):
        await anext(reader)


async def test_url_policy_refusal_at_connect_raises_upstream_rejected(upstream: Any) -> None:
    """An address the policy refuses is as final as a 403; the policy's message is kept."""
    upstream(UrlRejected("ws_url address 127.0.0.1 is loopback and not allowed"))
    reader = UpstreamReader("s", URL, SETTINGS)
    with pytest.raises(UpstreamRejected, match="loopback"):
        await anext(reader)


async def test_close_from_another_task_stops_a_waiting_reader(upstream: Any) -> None:
    """The owner's close(1000) ends a pending receive and reaches the connection."""
    connection = FakeConnection([frame(1)])
    upstream(connection)
    reader = UpstreamReader("s", URL, SETTINGS)
    seen: list[int] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for message in reader:
            seen.append(message.seq)
            first.set()

    async with asyncio.TaskGroup() as group:
        group.create_task(consume())
        await first.wait()
        await reader.close(1000)
    assert seen == [1]
    assert connection.closed_with == 1000
    assert reader.end_reason == "closed by the owner (close code 1000)"


async def test_close_during_backoff_stops_without_waiting_for_the_delay(upstream: Any) -> None:
    """A stop never waits out a long reconnect delay."""
    upstream()  # every connect is refused
    slow = Settings(allow_insecure_ws=True, backoff_base_seconds=60, backoff_max_seconds=60)
    reader = UpstreamReader("s", URL, slow, rand=lambda: 0.99)
    consumer = asyncio.create_task(anext(reader))
    await asyncio.sleep(0.01)
    await reader.close(1001)
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(consumer, timeout=2)


async def test_leaving_the_block_with_an_error_closes_with_1001(upstream: Any) -> None:
    """An owner that fails or is cancelled says "going away", not "stream over"."""
    connection = FakeConnection([frame(1)])
    upstream(connection)
    with pytest.raises(RuntimeError):
        async with UpstreamReader("s", URL, SETTINGS) as reader:
            await anext(reader)
            raise RuntimeError("owner failed")
    assert connection.closed_with == 1001


async def test_cancellation_propagates_and_the_connection_is_closed(upstream: Any) -> None:
    """CancelledError is never swallowed; leaving the block closes the socket."""
    connection = FakeConnection([])
    upstream(connection)

    async def hold() -> None:
        async with UpstreamReader("s", URL, SETTINGS) as reader:
            await anext(reader)

    task = asyncio.create_task(hold())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert connection.closed_with == 1001


async def test_a_rejection_carries_no_upstream_response(upstream: Any) -> None:
    """The refused handshake's headers and body never ride along in the exception chain."""
    response = Response(403, "Forbidden", Headers([("Set-Cookie", "s3cr3t")]), b"s3cr3t body")
    upstream(InvalidStatus(response))
    with pytest.raises(UpstreamRejected) as rejected:
        await anext(UpstreamReader("s", URL, SETTINGS))
    assert rejected.value.__cause__ is None
    assert rejected.value.__suppress_context__
