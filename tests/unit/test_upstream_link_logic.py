"""UpstreamLink's own logic against scripted connections (no sockets): resume point, backoff,
what each outcome means, parking a refused stream, closing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.frames import TEXT, Frame
from websockets.http11 import Response

from streamlease.errors import UrlRejected
from streamlease.profile import parse_profile
from streamlease.rules import backoff_seconds
from streamlease.settings import Settings
from worker.stream.link import SecretsUnavailable, UpstreamEvent, UpstreamEventKind, UpstreamLink
from worker.stream.transport import CloseBy, Closed, UpstreamHandler

SETTINGS = Settings(
    allow_insecure_ws=True,
    backoff_base_seconds=0.001,
    backoff_max_seconds=0.004,
    stable_seconds=10.0,
)
URL = "ws://upstream.example/s"


def closed(code: int, by: CloseBy = CloseBy.UPSTREAM) -> Closed:
    return Closed(code, "", by)


DROPPED = Closed(1006, "", CloseBy.NETWORK)


class FakeTransport:
    """Plays ``script`` to its handler — batches of seqs, then maybe how it closed — and then
    stays open until closed."""

    def __init__(self, script: list[list[int] | Closed]) -> None:
        self.script = script
        self.handler: UpstreamHandler | None = None
        self.closed_with: int | None = None
        self.sent: list[str] = []
        self.paused = False

    def start(self, handler: UpstreamHandler) -> None:
        self.handler = handler
        asyncio.get_running_loop().call_soon(self._play)

    def _play(self) -> None:
        assert self.handler is not None
        for item in self.script:
            if isinstance(item, Closed):
                self.handler.connection_closed(item)
                return
            self.handler.messages_received(
                [Frame(TEXT, bytearray(b'{"seq":%d}' % n)) for n in item]
            )

    async def wait_closed(self) -> Closed:
        return closed(self.closed_with or 1000, CloseBy.WORKER)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def send_text(self, text: str) -> None:
        self.sent.append(text)

    def close(self, code: int, reason: str = "") -> None:
        if self.closed_with is None and self.handler is not None:
            self.closed_with = code
            self.handler.connection_closed(closed(code, CloseBy.WORKER))

    def abort(self) -> None:
        self.close(1006)


@dataclass
class FakeUpstream:
    """Hands out one scripted outcome per connect: a FakeTransport or an exception."""

    outcomes: list[FakeTransport | BaseException]
    from_seqs: list[int] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    queries: list[list[tuple[str, str]]] = field(default_factory=list)
    headers: list[Any] = field(default_factory=list)

    async def connect(
        self,
        url: str,
        settings: Settings,
        handler: UpstreamHandler,
        *,
        query: list[tuple[str, str]],
        **kw: Any,
    ) -> Any:
        self.from_seqs.append(int(dict(query).get(settings.resume_param, "-1")))
        self.urls.append(url)
        self.queries.append(list(query))
        self.headers.append(kw.get("headers"))
        outcome = self.outcomes.pop(0) if self.outcomes else ConnectionRefusedError(111, "x")
        if isinstance(outcome, BaseException):
            raise outcome
        outcome.start(handler)
        return outcome


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeUpstream]:
    def install(*outcomes: FakeTransport | BaseException) -> FakeUpstream:
        fake = FakeUpstream(list(outcomes))
        monkeypatch.setattr("worker.stream.link.connect_upstream", fake.connect)
        return fake

    return install


class Stream:
    """A link's owner: takes every seq it is handed, remembers the last one."""

    def __init__(self, last_seq: int = 0, **options: Any) -> None:
        self.seqs: list[int] = []
        self.last_seq = last_seq
        self.events: list[UpstreamEvent] = []
        self.got = asyncio.Event()
        options.setdefault("on_event", self.events.append)
        self.link = UpstreamLink(
            "s",
            URL,
            options.pop("settings", SETTINGS),
            self.received,
            resume_from=lambda: self.last_seq,
            **options,
        )

    def received(self, batch: list[Frame]) -> None:
        for message in batch:
            seq = int(bytes(message.data)[7:-1])
            self.seqs.append(seq)
            self.last_seq = max(self.last_seq, seq)
        self.got.set()

    def kinds(self, kind: UpstreamEventKind) -> list[UpstreamEvent]:
        return [e for e in self.events if e.kind is kind]

    async def until(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.seqs) < count:
                self.got.clear()
                await self.got.wait()


async def run_until(stream: Stream, count: int) -> None:
    """Run the link until ``count`` seqs arrived, then close it."""
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(stream.link.run())
        await stream.until(count)
        await stream.link.close(1000)


async def test_batches_go_straight_to_the_owner(upstream: Any) -> None:
    """The owner's callback is the connection's: every batch, in order, nothing in between."""
    transport = FakeTransport([[1, 2], [3]])
    upstream(transport)
    stream = Stream()
    await run_until(stream, 3)
    assert stream.seqs == [1, 2, 3]
    assert transport.handler is not None
    assert transport.handler.messages_received == stream.received


async def test_the_first_connect_asks_for_the_checkpoint_plus_one(upstream: Any) -> None:
    fake = upstream(FakeTransport([[8]]))
    stream = Stream(last_seq=7)
    await run_until(stream, 1)
    assert fake.from_seqs == [8]


async def test_a_reconnect_resumes_after_the_last_seq_taken_in(upstream: Any) -> None:
    """After a drop the next connect asks for what follows the owner's last seq."""
    fake = upstream(FakeTransport([[1, 2], DROPPED]), FakeTransport([[3, 4]]))
    stream = Stream()
    await run_until(stream, 4)
    assert fake.from_seqs == [1, 3]
    assert stream.link.retries == 1
    assert [e.close_code for e in stream.kinds(UpstreamEventKind.RETRYING)] == [1006]


async def test_failed_connects_back_off_exponentially_with_full_jitter(upstream: Any) -> None:
    """Delays follow rules.backoff_seconds of the consecutive failure count (capped)."""
    upstream(*[ConnectionRefusedError(111, "refused")] * 4, FakeTransport([[1]]))
    stream = Stream(rand=lambda: 0.5)
    await run_until(stream, 1)
    delays = [e.delay_seconds for e in stream.kinds(UpstreamEventKind.RETRYING)]
    assert delays == [backoff_seconds(n, 0.001, 0.004, 0.5) for n in range(4)]
    assert all("refused" in e.error for e in stream.kinds(UpstreamEventKind.RETRYING))


async def test_backoff_resets_only_after_a_connection_stayed_up_stable_seconds(
    upstream: Any,
) -> None:
    """Short-lived connections keep growing the backoff; one that lasted resets it."""
    now = [0.0]
    upstream(*[FakeTransport([[n], DROPPED]) for n in range(1, 5)])
    lifetimes = iter([1.0, 1.0, 11.0])  # stable_seconds is 10
    events: list[UpstreamEvent] = []

    def on_event(event: UpstreamEvent) -> None:
        events.append(event)
        if event.kind is UpstreamEventKind.CONNECTED and event.attempt <= 3:
            now[0] += next(lifetimes)  # how long this connection will have lived

    stream = Stream(on_event=on_event, clock=lambda: now[0])
    await run_until(stream, 4)
    assert [e.attempt for e in events if e.kind is UpstreamEventKind.RETRYING] == [1, 2, 1]


async def test_a_normal_close_from_the_upstream_ends_the_link(upstream: Any) -> None:
    """The upstream said the stream is over (1000): no reconnect, the reason is kept."""
    fake = upstream(FakeTransport([[1], closed(1000)]))
    stream = Stream()
    await asyncio.wait_for(stream.link.run(), 5)
    assert stream.seqs == [1]
    assert stream.link.upstream_ended
    assert stream.link.end_reason is not None and "1000" in stream.link.end_reason
    assert stream.events[-1].kind is UpstreamEventKind.ENDED
    assert fake.from_seqs == [1]


async def test_going_away_from_the_upstream_reconnects_and_resumes(upstream: Any) -> None:
    """1001 (a server restarting) is not the end of the stream: reconnect from the next seq."""
    fake = upstream(FakeTransport([[1], closed(1001)]), FakeTransport([[2]]))
    stream = Stream()
    await run_until(stream, 2)
    assert not stream.link.upstream_ended
    assert fake.from_seqs == [1, 2]
    assert [e.close_code for e in stream.kinds(UpstreamEventKind.RETRYING)] == [1001]


async def test_our_own_1009_is_not_the_upstream_ending_the_stream(upstream: Any) -> None:
    """The side whose close came first decides: our close for an oversized message, echoed by
    the upstream, is retried."""
    upstream(FakeTransport([[1], closed(1009, CloseBy.WORKER)]), FakeTransport([[2]]))
    stream = Stream()
    await run_until(stream, 2)
    retried = stream.kinds(UpstreamEventKind.RETRYING)
    assert [e.close_code for e in retried] == [1009]
    assert "over 1000000 bytes" in retried[0].error


async def test_a_refused_handshake_parks_the_stream_and_tries_again(upstream: Any) -> None:
    """HTTP 403: reported as rejected, secrets read afresh, tried again after the longest
    backoff — the stream stays with this link, it is not failed over."""
    forgotten: list[bool] = []
    fake = upstream(InvalidStatus(Response(403, "Forbidden", Headers(), b"")), FakeTransport([[1]]))
    stream = Stream(forget_secrets=lambda: forgotten.append(True))
    await run_until(stream, 1)
    rejected = stream.kinds(UpstreamEventKind.REJECTED)
    assert [(e.status, e.delay_seconds) for e in rejected] == [(403, 0.004)]
    assert forgotten == [True]
    assert fake.from_seqs == [1, 1]


async def test_a_url_policy_refusal_at_connect_is_a_rejection(upstream: Any) -> None:
    """An address the policy refuses is as final as a 403; the policy's message is kept."""
    upstream(UrlRejected("ws_url address 127.0.0.1 is loopback and not allowed"))
    reported: list[UpstreamEvent] = []
    rejected = asyncio.Event()

    def on_event(event: UpstreamEvent) -> None:
        reported.append(event)
        if event.kind is UpstreamEventKind.REJECTED:
            rejected.set()

    stream = Stream(on_event=on_event)
    task = asyncio.create_task(stream.link.run())
    await asyncio.wait_for(rejected.wait(), 5)
    await stream.link.close()
    await task
    assert "loopback" in reported[-1].error


async def test_a_rejection_carries_no_upstream_response(upstream: Any) -> None:
    """The refused handshake's headers and body reach no event text."""
    response = Response(403, "Forbidden", Headers([("Set-Cookie", "s3cr3t")]), b"s3cr3t body")
    upstream(InvalidStatus(response), FakeTransport([[1]]))
    stream = Stream()
    await run_until(stream, 1)
    assert all("s3cr3t" not in e.error for e in stream.events)


async def test_secrets_not_available_yet_are_retried(upstream: Any) -> None:
    """A secret that cannot be read for now: back off and try again, no connect meanwhile;
    then its value goes into the header that refers to it."""
    fake = upstream(FakeTransport([[1]]))
    answers: list[Any] = [SecretsUnavailable("secret streamlease/x not readable (throttled)")]

    async def secrets() -> dict[str, str]:
        if answers:
            raise answers.pop()
        return {"streamlease/x": "t"}

    auth = parse_profile(
        {"headers": {"Authorization": "Bearer {secret:streamlease/x}"}}, secrets_prefix=None
    )
    stream = Stream(secrets=secrets, profile=auth)
    await run_until(stream, 1)
    assert fake.headers == [[("Authorization", "Bearer t")]]
    assert "throttled" in stream.kinds(UpstreamEventKind.RETRYING)[0].error


async def test_the_open_message_carries_the_resume_point_on_every_connect(upstream: Any) -> None:
    subscribe = parse_profile(
        {"open_message": '{"from":{next_seq}}', "resume": "open_message"}, secrets_prefix=None
    )
    first, second = FakeTransport([[4], DROPPED]), FakeTransport([[5]])
    upstream(first, second)
    stream = Stream(last_seq=3, profile=subscribe)
    await run_until(stream, 2)
    assert (first.sent, second.sent) == (['{"from":4}'], ['{"from":5}'])


async def test_reading_paused_stays_paused_across_a_reconnect(upstream: Any) -> None:
    first, second = FakeTransport([[1], DROPPED]), FakeTransport([[2]])
    upstream(first, second)
    stream = Stream()
    stream.link.pause_reading()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(stream.link.run())
        await stream.until(2)
        assert second.paused
        stream.link.resume_reading()
        assert not second.paused
        await stream.link.close()


async def test_close_from_another_task_stops_the_link_with_the_owners_code(upstream: Any) -> None:
    transport = FakeTransport([[1]])
    upstream(transport)
    stream = Stream()
    task = asyncio.create_task(stream.link.run())
    await stream.until(1)
    await stream.link.close(1001)
    await asyncio.wait_for(task, 5)
    assert transport.closed_with == 1001
    assert stream.link.end_reason == "closed by the owner (close code 1001)"


async def test_close_during_backoff_stops_without_waiting_for_the_delay(upstream: Any) -> None:
    """A stop never waits out a long reconnect delay."""
    upstream()  # every connect is refused
    slow = Settings(allow_insecure_ws=True, backoff_base_seconds=60, backoff_max_seconds=60)
    stream = Stream(settings=slow, rand=lambda: 0.99)
    task = asyncio.create_task(stream.link.run())
    await asyncio.sleep(0.01)
    await stream.link.close(1001)
    await asyncio.wait_for(task, timeout=2)


async def test_a_cancelled_run_leaves_the_connection_to_close(upstream: Any) -> None:
    """Cancelling ``run`` (an owner interrupted) propagates; ``close`` then closes it."""
    transport = FakeTransport([[1]])
    upstream(transport)
    stream = Stream()
    task = asyncio.create_task(stream.link.run())
    await stream.until(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert transport.closed_with is None
    await stream.link.close(1001)
    assert transport.closed_with == 1001


async def test_a_connection_that_cannot_take_the_open_message_is_dropped_and_retried(
    upstream: Any,
) -> None:
    """Closed before its subscribe message could be sent: not kept (its keepalive would hold
    it open otherwise), dropped, and a new connection subscribes."""
    subscribe = parse_profile(
        {"open_message": '{"from":{next_seq}}', "resume": "open_message"}, secrets_prefix=None
    )

    class Closing(FakeTransport):
        def send_text(self, text: str) -> None:
            raise ConnectionError("closed")

    first, second = Closing([]), FakeTransport([[1]])
    upstream(first, second)
    stream = Stream(profile=subscribe)
    await run_until(stream, 1)
    assert first.closed_with == 1006  # aborted
    assert second.sent == ['{"from":1}']
    assert "open message" in stream.kinds(UpstreamEventKind.RETRYING)[0].error


async def test_connect_attempts_are_traced_until_the_first_connection_opened(
    upstream: Any,
) -> None:
    """Each attempt of the start runs inside its own span (a refused one sees the error); the
    reconnect after a drop belongs to no start and is not traced."""
    upstream(
        ConnectionRefusedError(111, "refused"),
        FakeTransport([[1], DROPPED]),
        FakeTransport([[2]]),
    )
    spans: list[tuple[int, str]] = []

    @contextlib.contextmanager
    def span(attempt: int) -> Iterator[None]:
        try:
            yield
        except OSError:
            spans.append((attempt, "failed"))
            raise
        spans.append((attempt, "ok"))

    stream = Stream(connect_span=span)
    await run_until(stream, 2)
    assert spans == [(1, "failed"), (2, "ok")]
    assert stream.link.connects == 2


async def test_a_change_of_settings_reconnects_at_once_with_them_from_the_last_seq(
    upstream: Any,
) -> None:
    """The open connection is closed (1000, ours), the next one goes to the new URL with the
    new profile's resume point right away — no backoff, no failure reported."""
    first, second = FakeTransport([[1, 2]]), FakeTransport([[3]])
    fake = upstream(first, second)
    slow = Settings(allow_insecure_ws=True, backoff_base_seconds=60, backoff_max_seconds=60)
    stream = Stream(settings=slow)
    after = parse_profile({"query": {"after": "{last_seq}"}}, secrets_prefix=None)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(stream.link.run())
        await stream.until(2)
        stream.link.change("ws://upstream-2.example/s", after, None, None)
        await stream.until(3)
        await stream.link.close(1000)
    assert first.closed_with == 1000
    assert fake.urls == [URL, "ws://upstream-2.example/s"]
    assert fake.queries == [[("from_seq", "1")], [("after", "2")]]
    assert stream.kinds(UpstreamEventKind.RETRYING) == []


async def test_a_change_ends_the_wait_of_a_parked_stream(upstream: Any) -> None:
    """A stream parked after a refusal (say, a wrong header) tries the new settings at once,
    not after the parking delay."""
    refused = InvalidStatus(Response(403, "Forbidden", Headers(), b""))
    fake = upstream(refused, FakeTransport([[1]]))
    slow = Settings(allow_insecure_ws=True, backoff_base_seconds=60, backoff_max_seconds=60)
    stream = Stream(settings=slow)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(stream.link.run())
        async with asyncio.timeout(5):
            while not stream.kinds(UpstreamEventKind.REJECTED):  # noqa: ASYNC110 - a fake
                await asyncio.sleep(0.01)
        stream.link.change(
            "ws://upstream-2.example/s", parse_profile({}, secrets_prefix=None), None, None
        )
        await stream.until(1)
        await stream.link.close(1000)
    assert fake.urls == [URL, "ws://upstream-2.example/s"]
