"""Both upstream transports (websockets' sans-I/O client, picows) against a raw WebSocket
server whose every byte the test writes (real sockets): messages in batches, fragmented messages
assembled, the size limit, a close in the middle of a batch, no redirect followed, handshake
statuses, subprotocols, pause and resume, and the shared keepalive. Every test runs on each."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from multidict import CIMultiDict
from websockets.exceptions import InvalidStatus, NegotiationError
from websockets.frames import BINARY, CLOSE, CONT, PING, PONG, TEXT, Close, Frame
from websockets.http11 import Request, Response
from websockets.streams import StreamReader
from websockets.utils import accept_key

from streamlease.settings import UpstreamLibrary
from worker.stream import picows_client, websocket
from worker.stream.keepalive import Keepalive
from worker.stream.picows_client import open_picows
from worker.stream.transport import CloseBy, Closed, Target, UpstreamHandler, UpstreamTransport
from worker.stream.websocket import KeepaliveRegistry, open_websocket

LIMIT = 1_000_000

Opener = Callable[[Target, UpstreamHandler, KeepaliveRegistry | None], Awaitable[UpstreamTransport]]
OPENERS: dict[UpstreamLibrary, Opener] = {
    UpstreamLibrary.WEBSOCKETS: open_websocket,
    UpstreamLibrary.PICOWS: open_picows,
}


@pytest.fixture(params=list(UpstreamLibrary))
def open_upstream(request: pytest.FixtureRequest) -> Opener:
    """Each transport's opener in turn."""
    return OPENERS[request.param]


def frame_bytes(opcode: int, data: bytes, *, fin: bool = True) -> bytes:
    """One server frame (unmasked), as it goes on the wire."""
    return Frame(opcode, data, fin).serialize(mask=False)  # type: ignore[arg-type]


def text(data: str, *, fin: bool = True) -> bytes:
    return frame_bytes(TEXT, data.encode(), fin=fin)


def close_frame(code: int) -> bytes:
    return frame_bytes(CLOSE, Close(code, "").serialize())


@dataclass
class Peer:
    """One accepted client connection of the raw server."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    request: bytes = b""
    """The client's handshake request, as sent."""
    received: list[Frame] = field(default_factory=list)

    def write(self, *chunks: bytes) -> None:
        """Send ``chunks`` in one write (one segment on loopback: one read on the other side)."""
        self.writer.write(b"".join(chunks))

    async def frames(self, count: int, limit_seconds: float = 5.0) -> list[Frame]:
        """The first ``count`` frames the client sent (masked, as clients send them)."""
        parser = StreamReader()
        parsed: list[Frame] = []
        async with asyncio.timeout(limit_seconds):
            while len(parsed) < count:
                chunk = await self.reader.read(65536)
                if not chunk:
                    break
                parser.feed_data(chunk)
                while True:
                    generator = Frame.parse(parser.read_exact, mask=True)
                    try:
                        next(generator)
                    except StopIteration as done:
                        parsed.append(done.value)
                        continue
                    break  # not enough data: the frame is read again with more
        return parsed


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_server(
    answer: Callable[[bytes], bytes] | None = None, headers: bytes = b""
) -> AsyncIterator[tuple[str, asyncio.Queue[Peer]]]:
    """A server on 127.0.0.1 that answers each handshake (101 with ``headers`` besides the
    required ones by default, or ``answer(key)``) and hands the connection to the test. Yields
    its ``ws://`` URL and the queue of peers."""
    peers: asyncio.Queue[Peer] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        match = re.search(rb"(?i)sec-websocket-key: *(\S+)", request)
        assert match is not None
        key = match.group(1)
        if answer is not None:
            writer.write(answer(key))
            await writer.drain()
            writer.close()
            return
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: "
            + accept_key(key.decode()).encode()
            + b"\r\n"
            + headers
            + b"\r\n"
        )
        await peers.put(Peer(reader, writer, request))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}/feed", peers
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


class Recorder:
    """A handler that keeps every batch and the close."""

    def __init__(self) -> None:
        self.batches: list[list[Frame]] = []
        self.closed: Closed | None = None
        self.changed = asyncio.Event()

    def messages_received(self, messages: list[Frame]) -> None:
        self.batches.append(messages)
        self.changed.set()

    def connection_closed(self, closed: Closed) -> None:
        self.closed = closed
        self.changed.set()

    async def until(self, condition: Callable[[], bool], limit_seconds: float = 5.0) -> None:
        async with asyncio.timeout(limit_seconds):
            while not condition():
                self.changed.clear()
                await self.changed.wait()

    @property
    def messages(self) -> list[bytes]:
        return [bytes(m.data) for batch in self.batches for m in batch]


async def opened(
    open_upstream: Opener, url: str, keepalive: Keepalive | None = None
) -> tuple[UpstreamTransport, Recorder]:
    recorder = Recorder()
    target = Target(url, "127.0.0.1", max_size=LIMIT)
    transport = await open_upstream(target, recorder, keepalive)
    return transport, recorder


async def test_what_one_read_completed_is_one_batch_in_order(open_upstream: Opener) -> None:
    async with raw_server() as (url, peers):
        transport, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        peer.write(text("a"), text("b"), frame_bytes(BINARY, b"\x00c"))
        await recorder.until(lambda: len(recorder.messages) == 3)
        assert recorder.batches == [recorder.batches[0]]
        assert [(m.opcode, bytes(m.data)) for m in recorder.batches[0]] == [
            (TEXT, b"a"),
            (TEXT, b"b"),
            (BINARY, b"\x00c"),
        ]
        transport.abort()


async def test_an_open_connection_keeps_none_of_the_handshakes_headers(
    open_upstream: Opener,
) -> None:
    """Both libraries hold on to the handshake for as long as the connection lives (websockets'
    parser its answer, picows its request and answer): what a chatty upstream said (cookies,
    policies) is not kept with every held stream, nor the request's resolved secrets."""
    chatty = b"".join(b"X-Chatty-%d: %s\r\n" % (n, b"v" * 200) for n in range(20))
    secret = "Bearer kept-nowhere-0123456789"
    async with raw_server(headers=chatty) as (url, peers):
        recorder = Recorder()
        target = Target(url, "127.0.0.1", headers=[("Authorization", secret)], max_size=LIMIT)
        transport = await open_upstream(target, recorder, None)
        peer = await peers.get()
        assert secret.encode() in peer.request
        peer.write(text("a"))
        await recorder.until(lambda: recorder.messages == [b"a"])
        del target
        gc.collect()

        def holds_them(o: object) -> bool:
            if isinstance(o, Request | Response):
                return "X-Chatty-0" in o.headers or secret in o.headers.values()
            if isinstance(o, CIMultiDict):  # picows' headers
                return "X-Chatty-0" in o or secret in o.values()
            if isinstance(o, list):  # the extra headers picows was given
                return any(isinstance(h, tuple) and secret in h for h in o)
            return False

        assert [o for o in gc.get_objects() if holds_them(o)] == []
        transport.abort()


async def test_a_fragmented_message_arrives_whole_and_a_ping_between_is_answered(
    open_upstream: Opener,
) -> None:
    """Three fragments with a ping between them (control frames may interleave): one message,
    its bytes joined, its type the first fragment's; the ping gets its pong."""
    async with raw_server() as (url, peers):
        transport, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        peer.write(text('{"seq":1,', fin=False), frame_bytes(PING, b"hi"))
        peer.write(frame_bytes(CONT, b'"data":', fin=False))
        await asyncio.sleep(0.05)
        assert recorder.batches == []  # nothing until the last fragment
        peer.write(frame_bytes(CONT, b'"x"}'), text("next"))
        await recorder.until(lambda: len(recorder.messages) == 2)
        assert recorder.messages == [b'{"seq":1,"data":"x"}', b"next"]
        assert recorder.batches[0][0].opcode is TEXT
        (pong,) = await peer.frames(1)
        assert (pong.opcode, bytes(pong.data)) == (PONG, b"hi")
        transport.abort()


async def test_a_message_at_the_size_limit_is_delivered_and_one_byte_more_is_1009(
    open_upstream: Opener,
) -> None:
    """1,000,000 bytes pass; 1,000,001 close the connection with 1009 before the payload is
    read, by us (so it is retried, not an end of the stream), and nothing of it is delivered."""
    async with raw_server() as (url, peers):
        transport, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        peer.write(frame_bytes(BINARY, b"x" * LIMIT))
        await recorder.until(lambda: len(recorder.messages) == 1)
        assert len(recorder.messages[0]) == LIMIT
        peer.write(frame_bytes(BINARY, b"y" * (LIMIT + 1)))
        (close,) = await peer.frames(1)
        assert close.opcode is CLOSE and Close.parse(close.data).code == 1009
        peer.writer.close()
        await recorder.until(lambda: recorder.closed is not None)
        assert recorder.closed == Closed(1009, recorder.closed.reason, CloseBy.WORKER)
        assert len(recorder.messages) == 1
        del transport


async def test_a_fragmented_message_over_the_limit_is_1009_too(open_upstream: Opener) -> None:
    async with raw_server() as (url, peers):
        _, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        peer.write(frame_bytes(TEXT, b"a" * (LIMIT // 2), fin=False))
        peer.write(frame_bytes(CONT, b"b" * (LIMIT // 2 + 1)))
        (close,) = await peer.frames(1)
        assert Close.parse(close.data).code == 1009
        peer.writer.close()
        await recorder.until(lambda: recorder.closed is not None)
        assert recorder.messages == []


async def test_a_close_in_the_middle_of_a_batch_delivers_what_came_before_it(
    open_upstream: Opener,
) -> None:
    """Messages and the upstream's close in one read: the messages are one batch, handed over
    before the close is reported; what follows the close frame is discarded; the close is
    echoed and attributed to the upstream."""
    async with raw_server() as (url, peers):
        _, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        peer.write(text("1"), text("2"), close_frame(1000), text("after"))
        (echo,) = await peer.frames(1)
        assert Close.parse(echo.data).code == 1000
        peer.writer.close()
        await recorder.until(lambda: recorder.closed is not None)
        assert recorder.messages == [b"1", b"2"]
        assert recorder.closed is not None
        assert (recorder.closed.code, recorder.closed.by) == (1000, CloseBy.UPSTREAM)


async def test_a_redirect_at_the_handshake_is_an_answer_not_followed(open_upstream: Opener) -> None:
    """302 with a Location: the open fails with that status; the other address never sees a
    connection, and the handler hears of nothing."""
    async with raw_server() as (elsewhere, other_peers):
        location = elsewhere.encode()

        def redirect(_: bytes) -> bytes:
            return b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n"

        recorder = Recorder()
        async with raw_server(redirect) as (url, _):
            with pytest.raises(InvalidStatus) as refused:
                await open_upstream(Target(url, "127.0.0.1"), recorder, None)
        assert refused.value.response.status_code == 302
        await asyncio.sleep(0.1)
        assert other_peers.empty()
        assert recorder.closed is None  # a connection that never opened closes for nobody


@pytest.mark.parametrize("status", [401, 503])
async def test_a_refusal_read_before_the_opener_resumes_still_fails_the_open(
    open_upstream: Opener, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy loop the handshake's answer can be read before ``create_connection``'s caller
    resumes: a refusal read then must still fail the open (it once read as an open connection
    that never delivered anything). The loop is made late on purpose: its ``create_connection``
    returns only once the refusal was read and the socket dropped."""
    loop = asyncio.get_running_loop()
    real = loop.create_connection

    async def late(*args: Any, **kwargs: Any) -> Any:
        connected = await real(*args, **kwargs)
        async with asyncio.timeout(5):
            while not connected[0].is_closing():  # noqa: ASYNC110 (a transport has no event for it)
                await asyncio.sleep(0.01)
        return connected

    monkeypatch.setattr(loop, "create_connection", late)

    def refuse(_: bytes) -> bytes:
        return f"HTTP/1.1 {status} No\r\nContent-Length: 3\r\n\r\nno\n".encode()

    recorder = Recorder()
    async with raw_server(refuse) as (url, _):
        with pytest.raises(InvalidStatus) as refused:
            await open_upstream(Target(url, "127.0.0.1"), recorder, None)
    assert refused.value.response.status_code == status
    assert recorder.closed is None


async def test_paused_reading_delivers_nothing_until_resumed(open_upstream: Opener) -> None:
    async with raw_server() as (url, peers):
        transport, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        transport.pause_reading()
        peer.write(text("1"), text("2"))
        await asyncio.sleep(0.1)
        assert recorder.messages == []
        transport.resume_reading()
        await recorder.until(lambda: len(recorder.messages) == 2)
        transport.abort()


async def test_a_silent_upstream_that_never_answers_pings_is_closed_with_1011(
    open_upstream: Opener,
) -> None:
    """The shared keepalive pings a connection silent for the interval; with no answer within
    the timeout it fails it with 1011 (ours: retried by the stream, as any drop)."""
    keepalive = Keepalive(0.2, 0.2)
    async with raw_server() as (url, peers), asyncio.TaskGroup() as tasks:
        pings = tasks.create_task(keepalive.run())
        _, recorder = await opened(open_upstream, url, keepalive)
        peer = await peers.get()
        ping, close = await peer.frames(2)
        assert ping.opcode is PING
        assert Close.parse(close.data).code == 1011
        peer.writer.close()
        await recorder.until(lambda: recorder.closed is not None)
        assert recorder.closed is not None
        assert (recorder.closed.code, recorder.closed.by) == (1011, CloseBy.WORKER)
        assert len(keepalive) == 0
        pings.cancel()


async def test_a_connection_that_talks_is_never_pinged(open_upstream: Opener) -> None:
    """Anything read proves a connection alive: a busy one costs the keepalive nothing."""
    keepalive = Keepalive(0.2, 0.2)
    async with raw_server() as (url, peers), asyncio.TaskGroup() as tasks:
        pings = tasks.create_task(keepalive.run())
        transport, recorder = await opened(open_upstream, url, keepalive)
        peer = await peers.get()
        for n in range(10):
            peer.write(text(str(n)))
            await asyncio.sleep(0.06)
        await recorder.until(lambda: len(recorder.messages) == 10)
        transport.close(1000)
        (close,) = await peer.frames(1)
        assert close.opcode is CLOSE  # the first frame it sent: no ping before it
        transport.abort()
        pings.cancel()


async def test_our_text_and_close_reach_the_upstream_and_the_close_is_ours(
    open_upstream: Opener,
) -> None:
    """An open message goes out as one text frame; our close goes out with its code, the
    upstream's echo completes the handshake, and the close is attributed to us."""
    async with raw_server() as (url, peers):
        transport, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        transport.send_text('{"op":"subscribe"}')
        transport.close(4001, "settings changed")
        sent, close = await peer.frames(2)
        assert (sent.opcode, bytes(sent.data)) == (TEXT, b'{"op":"subscribe"}')
        assert Close.parse(close.data) == Close(4001, "settings changed")
        with pytest.raises(ConnectionError):
            transport.send_text("too late")
        peer.write(close_frame(4001))
        await recorder.until(lambda: recorder.closed is not None)
        assert recorder.closed == Closed(4001, "settings changed", CloseBy.WORKER)
        assert await transport.wait_closed() == recorder.closed


async def test_a_close_the_upstream_never_answers_drops_the_socket_after_the_timeout(
    open_upstream: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (websocket, picows_client):
        monkeypatch.setattr(module, "CLOSE_TIMEOUT_SECONDS", 0.2)
    async with raw_server() as (url, peers):
        transport, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        transport.close(1000)
        (close,) = await peer.frames(1)
        assert close.opcode is CLOSE
        await recorder.until(lambda: recorder.closed is not None, limit_seconds=2.0)
        assert recorder.closed is not None
        assert (recorder.closed.code, recorder.closed.by) == (1000, CloseBy.WORKER)
        assert await peer.reader.read() == b""  # the socket is gone


async def test_a_frame_with_a_reserved_bit_is_a_protocol_error_1002(open_upstream: Opener) -> None:
    """No extension was negotiated: RSV1 (compression's bit) is refused, by us."""
    async with raw_server() as (url, peers):
        _, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        compressed = bytearray(text("deflated?"))
        compressed[0] |= 0x40
        peer.write(text("before"), bytes(compressed))
        (close,) = await peer.frames(1)
        assert Close.parse(close.data).code == 1002
        peer.writer.close()
        await recorder.until(lambda: recorder.closed is not None)
        assert recorder.messages == [b"before"]
        assert recorder.closed is not None
        assert (recorder.closed.code, recorder.closed.by) == (1002, CloseBy.WORKER)


async def test_a_frame_with_a_reserved_bit_of_no_use_is_refused_and_its_bytes_never_logged(
    open_upstream: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    """RSV2 has no meaning at all: the connection fails with 1002, and nothing the upstream sent
    reaches a log line (picows' own error line quotes the frame: it is logged without it)."""
    caplog.set_level(logging.DEBUG)
    async with raw_server() as (url, peers):
        _, recorder = await opened(open_upstream, url)
        peer = await peers.get()
        odd = bytearray(text('{"token":"s3cr3t-upstream-bytes"}'))
        odd[0] |= 0x20
        peer.write(bytes(odd))
        await recorder.until(lambda: recorder.closed is not None)
        assert recorder.messages == []
        assert recorder.closed is not None
        assert (recorder.closed.code, recorder.closed.by) == (1002, CloseBy.WORKER)
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "s3cr3t" not in logged


async def test_subprotocols_are_offered_and_the_one_accepted_opens(open_upstream: Opener) -> None:
    async with raw_server(headers=b"Sec-WebSocket-Protocol: feed.v2\r\n") as (url, peers):
        recorder = Recorder()
        target = Target(url, "127.0.0.1", subprotocols=["feed.v1", "feed.v2"])
        transport = await open_upstream(target, recorder, None)
        peer = await peers.get()
        assert re.search(rb"(?i)\r\nsec-websocket-protocol: feed.v1, ?feed.v2\r\n", peer.request)
        transport.abort()


@pytest.mark.parametrize(
    "header",
    [
        b"Sec-WebSocket-Protocol: feed.v3\r\n",  # not offered
        b"Sec-WebSocket-Extensions: permessage-deflate\r\n",  # none offered
    ],
)
async def test_an_answer_accepting_what_was_not_offered_fails_the_open(
    open_upstream: Opener, header: bytes
) -> None:
    """The open fails (a negotiation error, retried like an invalid handshake), the socket is
    dropped, and the handler hears of nothing."""
    async with raw_server(headers=header) as (url, peers):
        recorder = Recorder()
        target = Target(url, "127.0.0.1", subprotocols=["feed.v1"])
        with pytest.raises(NegotiationError):
            await open_upstream(target, recorder, None)
        peer = await peers.get()
        peer.write(text("never delivered"))
        with contextlib.suppress(ConnectionResetError):  # dropped: closed or reset
            assert await peer.reader.read() == b""
        assert recorder.batches == [] and recorder.closed is None
