"""The default upstream transport: websockets' sans-I/O client on the event loop's transport.

:class:`WebSocketTransport` is an :class:`asyncio.Protocol` that feeds websockets'
:class:`~websockets.client.ClientProtocol` (``receive_data`` → ``events_received``,
``data_to_send``) and implements the seam of :mod:`worker.stream.transport`. The handshake, the
framing, the size limit (a frame or a fragmented message over ``max_size`` is answered with
close code 1009 before its payload is read), pongs to the upstream's pings and the closing
handshake are the library's; this module assembles fragmented messages, takes part in the
shared keepalive (:mod:`worker.stream.keepalive`) and drops the socket when a closing handshake
outlasts :data:`CLOSE_TIMEOUT_SECONDS`. TLS verifies certificates and host names against the
system's trust store, SNI being the URL's host while the socket goes to the checked address.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol, cast

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState
from websockets.frames import BINARY, CLOSE, CONT, TEXT, Frame
from websockets.http11 import USER_AGENT, Request, Response
from websockets.protocol import OPEN, Event, State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from worker.stream.keepalive import Watched
from worker.stream.transport import (
    CloseBy,
    Closed,
    SocketConnection,
    Target,
    UpstreamHandler,
    connect_socket,
)

CLOSE_TIMEOUT_SECONDS: Final = 3.0
"""How long a closing handshake may take before the socket is dropped."""
KEEPALIVE_PING: Final = b"keep"
"""Payload of keepalive pings (any answer, or any data at all, proves the connection alive)."""


class KeepaliveRegistry(Protocol):
    """The shared keepalive as a connection sees it."""

    def add(self, connection: Watched) -> None: ...

    def discard(self, connection: Watched) -> None: ...


async def open_websocket(
    target: Target, handler: UpstreamHandler, keepalive: KeepaliveRegistry | None = None
) -> WebSocketTransport:
    """Open one WebSocket connection to ``target`` and return it once the handshake succeeded.

    No redirect is followed (a 3xx is an answer like any other), no proxy is used, nothing is
    compressed. The caller bounds the time (``asyncio.timeout``); on any failure or cancellation
    the socket is dropped. Raises ``OSError`` (refused, unreachable, TLS: ``ssl.SSLError``) or a
    websockets ``InvalidHandshake`` (``InvalidStatus`` for a non-101 answer).
    """
    loop = asyncio.get_running_loop()
    uri = parse_uri(target.uri)
    protocol = ClientProtocol(
        uri,
        subprotocols=[Subprotocol(p) for p in target.subprotocols] or None,
        max_size=target.max_size,
    )
    request = protocol.connect()
    request.headers.update(target.headers)
    request.headers.setdefault("User-Agent", USER_AGENT)
    connection = WebSocketTransport(protocol, request, handler, keepalive, loop)
    try:
        await connect_socket(target, uri, lambda: connection)
        await connection.handshake_done()
    except BaseException:
        connection.abort()
        raise
    if keepalive is not None and connection.is_open:
        keepalive.add(connection)
    return connection


class WebSocketTransport(asyncio.Protocol, SocketConnection):
    """websockets' sans-I/O client on an asyncio transport (see the module docstring)."""

    __slots__ = (
        "_closed",
        "_established",
        "_fragments",
        "_handler",
        "_handshaking",
        "_keepalive",
        "_loop",
        "_opened",
        "_paused",
        "_protocol",
        "_request",
        "_timer",
        "_transport",
        "active",
        "idle_since",
        "ping_sent_at",
    )

    def __init__(
        self,
        protocol: ClientProtocol,
        request: Request,
        handler: UpstreamHandler,
        keepalive: KeepaliveRegistry | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._protocol = protocol
        self._request: Request | None = request
        self._handler = handler
        self._keepalive = keepalive
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._opened: asyncio.Future[None] = loop.create_future()
        """Settled by the handshake's answer (or the connection's loss before it), kept after:
        the answer may come before the opener awaits it (a busy loop runs ``data_received``
        before ``create_connection``'s caller resumes)."""
        self._handshaking = True
        self._established = False
        self._closed: asyncio.Future[Closed] = loop.create_future()
        self._fragments: list[Frame] | None = None
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        self.active = False
        """Set by every read; the keepalive clears it (:func:`worker.stream.keepalive.visit`)."""
        self.idle_since = loop.time()
        self.ping_sent_at = 0.0
        """When the keepalive ping still unanswered was sent (0: none is)."""

    # --- what the owner calls ------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """True between a successful handshake and the start of the closing handshake."""
        return self._protocol.state is OPEN

    async def handshake_done(self) -> None:
        """Return once the upstream accepted the handshake; raise what failed it (also when
        the answer came before this call)."""
        await self._opened

    def send_text(self, text: str) -> None:
        """See :meth:`UpstreamTransport.send_text`."""
        try:
            self._protocol.send_text(text.encode())
        except InvalidState as exc:
            raise ConnectionError("the upstream connection is not open") from exc
        self._send()

    def close(self, code: int, reason: str = "") -> None:
        """See :meth:`UpstreamTransport.close`."""
        protocol = self._protocol
        if protocol.state is OPEN:
            protocol.send_close(code, reason)
            self._send()
            self._closing()
        elif protocol.state is State.CONNECTING:
            self.abort()

    def fail(self, code: int, reason: str) -> None:
        """Fail the connection as the library does on a protocol error: send ``code``, discard
        what follows, wait (bounded) for the upstream to close."""
        protocol = self._protocol
        if protocol.state is not OPEN:
            return
        protocol.fail(code, reason)
        self._send()
        self._closing()

    def abort(self) -> None:
        """See :meth:`UpstreamTransport.abort`."""
        opened = self._opened
        if opened.done() and not opened.cancelled():
            opened.exception()  # a failed handshake nobody awaits any more is no news
        transport = self._transport
        if transport is not None:
            transport.abort()

    def keepalive_ping(self) -> None:
        """Send the shared keepalive's ping."""
        self._protocol.send_ping(KEEPALIVE_PING)
        self._send()

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        request, self._request = self._request, None
        assert request is not None
        self._protocol.send_request(request)
        self._send()

    def data_received(self, data: bytes) -> None:
        protocol = self._protocol
        protocol.receive_data(data)
        events = protocol.events_received()
        writes = protocol.data_to_send()
        if writes:
            self._write(writes)
        self.active = True
        # Once open, every event is a frame (typing.cast would cost a call per read).
        frames: list[Frame] = self._handshake(events) if self._handshaking else events  # type: ignore[assignment]
        if protocol.close_sent is not None and self._timer is None:
            self._closing()  # the library failed the connection (1009, 1002, 1007), or answered
        if len(frames) == 1:  # the common read at moderate rates: one whole message, as it is
            frame = frames[0]
            if (frame.opcode is TEXT or frame.opcode is BINARY) and frame.fin:
                self._handler.messages_received(frames)
                return
        batch: list[Frame] = []
        for frame in frames:
            opcode = frame.opcode
            if opcode is TEXT or opcode is BINARY:
                if frame.fin:
                    batch.append(frame)
                else:
                    self._fragments = [frame]
            elif opcode is CONT:
                fragments = self._fragments
                assert fragments is not None  # the protocol refuses a stray continuation
                fragments.append(frame)
                if frame.fin:
                    self._fragments = None
                    whole = b"".join(f.data for f in fragments)
                    batch.append(Frame(fragments[0].opcode, whole))
            elif opcode is CLOSE:
                self._closing()
            # PING: the protocol queued the pong (sent above); PONG: ``active`` says enough.
        if batch:
            self._handler.messages_received(batch)

    def eof_received(self) -> bool | None:
        self._protocol.receive_eof()
        self._send()
        return None  # the WebSocket close handshake is over or broken: close the socket

    def connection_lost(self, exc: Exception | None) -> None:
        protocol = self._protocol
        protocol.receive_eof()  # idempotent; the state is CLOSED from here
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._keepalive is not None:
            self._keepalive.discard(self)
        self._handshaking = False
        opened = self._opened
        if not opened.done():
            failure = (
                protocol.handshake_exc
                or exc
                or ConnectionResetError("upstream closed the connection during the handshake")
            )
            opened.set_exception(failure)
        closed = closed_from(protocol)
        self._closed.set_result(closed)
        if self._established:  # the handler was never given a connection that did not open
            self._handler.connection_closed(closed)

    # --- internals -----------------------------------------------------------------------------

    def _handshake(self, events: list[Event]) -> list[Frame]:
        """The answer to the handshake is the first event: settle :meth:`handshake_done`;
        frames that came behind it in the same read are returned."""
        protocol = self._protocol
        opened = self._opened
        if protocol.handshake_exc is not None:
            self._handshaking = False
            if not opened.done():
                opened.set_exception(protocol.handshake_exc)
            self.abort()  # the answer is complete; the library has nothing more to say
            return []
        if protocol.state is State.CONNECTING:
            return []  # the answer is not complete yet
        self._handshaking = False
        self._established = True
        # The library's parser keeps the answer for as long as the connection lives (a local
        # of its parsing generator); what it said is checked by now, and its headers cost every
        # held stream ~1.7 KiB (more with a chatty upstream).
        cast(Response, events[0]).headers.clear()
        if not opened.done():
            opened.set_result(None)
        return cast(list[Frame], events[1:])

    def _closing(self) -> None:
        """A closing handshake is under way: keep reading (the upstream's close arrives as data
        and TCP's end), and drop the socket if it lasts too long."""
        if self._timer is None and self._transport is not None:
            self._timer = self._loop.call_later(CLOSE_TIMEOUT_SECONDS, self.abort)
        if self._paused:
            self._paused = False
            transport = self._transport
            if transport is not None and not transport.is_closing():
                transport.resume_reading()

    def _send(self) -> None:
        writes = self._protocol.data_to_send()
        if writes:
            self._write(writes)

    def _write(self, writes: list[bytes]) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        for data in writes:
            if data:
                transport.write(data)
            elif transport.can_write_eof():  # the library's half-close
                transport.write_eof()
            else:  # TLS cannot half-close
                transport.close()


def closed_from(protocol: ClientProtocol) -> Closed:
    """How a connection ended, from the close frames its protocol sent and received: the side
    whose close frame came first closed it; no close frame at all is 1006."""
    received, sent = protocol.close_rcvd, protocol.close_sent
    if received is not None and (sent is None or protocol.close_rcvd_then_sent):
        return Closed(received.code, received.reason, CloseBy.UPSTREAM)
    if sent is not None:
        return Closed(sent.code, sent.reason, CloseBy.WORKER)
    return Closed(1006, "", CloseBy.NETWORK)
