"""The upstream transport on picows: a WebSocket client whose framing is compiled (Cython).

:class:`PicowsTransport` implements the seam of :mod:`worker.stream.transport` like
:mod:`worker.stream.websocket` does, with picows' protocol in place of websockets' pure-Python
parser: the frame parser, the masking of what we send and the read buffer are picows'. What
picows leaves to its user is done here, the way websockets does it: the handshake's answer is
checked for the subprotocol and extensions offered; fragmented messages are assembled, the
whole message held to ``max_size`` (a single frame over it is refused by picows before its
payload is read; both are closed with 1009); pongs answer the upstream's pings; the closing
handshake echoes the upstream's code and drops the socket if it outlasts
:data:`~worker.stream.websocket.CLOSE_TIMEOUT_SECONDS`; the shared keepalive
(:mod:`worker.stream.keepalive`) pings silent connections (picows' own pinger, a task per
connection, is off).

The connection is opened here, not by ``picows.ws_connect``: the socket goes to the checked
address while ``Host`` and TLS's SNI (certificates verified) keep the URL's host, no redirect is
followed (a 3xx is an answer), no proxy is used. Messages reach the handler in batches: every
frame picows parses from one read is collected and handed over with the read's last frame
(picows marks it ``last_in_buffer``).
"""

from __future__ import annotations

import asyncio
from typing import Final

from picows import (
    WSCloseCode,
    WSError,
    WSFrame,
    WSHandshakeError,
    WSListener,
    WSMsgType,
    WSTransport,
)
from picows.picows import WSAutoPingStrategy, WSProtocol  # type: ignore[attr-defined]
from websockets.exceptions import InvalidHandshake
from websockets.frames import BINARY, TEXT, Frame, Opcode
from websockets.http11 import USER_AGENT
from websockets.uri import parse_uri

from worker.stream.picows_errors import (
    PICOWS_LOGGER,
    library_close_code,
    negotiation_failure,
    refusal,
)
from worker.stream.transport import (
    CloseBy,
    Closed,
    SocketConnection,
    Target,
    UpstreamHandler,
    connect_socket,
)
from worker.stream.websocket import CLOSE_TIMEOUT_SECONDS, KEEPALIVE_PING, KeepaliveRegistry

READ_BUFFER_BYTES: Final = 2048
"""picows' read buffer to start with (its smallest); it doubles while a read fills it."""
_HANDSHAKE_TIMEOUT_SECONDS: Final = 3600.0
"""picows' own handshake timer; the caller's ``asyncio.timeout`` is the one that counts."""


_TEXT: Final = WSMsgType.TEXT
_BINARY: Final = WSMsgType.BINARY
_CONTINUATION: Final = WSMsgType.CONTINUATION
_PING: Final = WSMsgType.PING
_PONG: Final = WSMsgType.PONG
_CLOSE: Final = WSMsgType.CLOSE


async def open_picows(
    target: Target, handler: UpstreamHandler, keepalive: KeepaliveRegistry | None = None
) -> PicowsTransport:
    """Open one WebSocket connection to ``target`` on picows; return it once the handshake
    succeeded. Same contract as :func:`worker.stream.websocket.open_websocket`: the caller
    bounds the time; on any failure or cancellation the socket is dropped; raises ``OSError``
    (``ssl.SSLError`` among them) or a websockets ``InvalidHandshake`` (``InvalidStatus`` for a
    non-101 answer, ``NegotiationError`` for a subprotocol or extension not offered)."""
    loop = asyncio.get_running_loop()
    uri = parse_uri(target.uri)
    host = f"[{uri.host}]" if ":" in uri.host else uri.host  # an IPv6 literal
    default_port = 443 if uri.secure else 80
    host_port = host if uri.port == default_port else f"{host}:{uri.port}"
    headers = list(target.headers)
    if not any(name.lower() == "user-agent" for name, _ in headers):
        headers.append(("User-Agent", USER_AGENT))
    if target.subprotocols:
        headers.append(("Sec-WebSocket-Protocol", ", ".join(target.subprotocols)))
    connection = PicowsTransport(handler, keepalive, loop, target)

    def protocol() -> _ClientProtocol:
        return _ClientProtocol(
            connection,
            host_port,
            uri.resource_name,
            True,  # client side
            connection.listener,
            PICOWS_LOGGER,
            True,  # an exception in our callbacks closes the connection (1011)
            _HANDSHAKE_TIMEOUT_SECONDS,
            False,  # no auto ping: the shared keepalive pings
            10.0,
            10.0,
            WSAutoPingStrategy.PING_WHEN_IDLE,
            False,  # pongs are sent here (a ping proves the connection alive too)
            target.max_size,
            headers,
            READ_BUFFER_BYTES,
        )

    try:
        ws_protocol = await connect_socket(target, uri, protocol)
        await connection.handshake_done(ws_protocol)
    except BaseException:
        connection.abort()
        raise
    finally:
        headers.clear()  # picows keeps the list it was given (the request is long sent)
    if keepalive is not None and connection.is_open:
        keepalive.add(connection)
    return connection


class _ClientProtocol(WSProtocol):  # type: ignore[misc]
    """picows' protocol, telling its connection when the socket is gone: picows tells its
    listener nothing of a handshake that failed."""

    __slots__ = ("_connection",)

    def __init__(self, connection: PicowsTransport, *args: object) -> None:
        super().__init__(*args)
        self._connection = connection

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._connection.socket_gone(self)


class PicowsTransport(WSListener, SocketConnection):
    """One upstream connection on picows (see the module docstring)."""

    __slots__ = (
        "_batch",
        "_close_sent",
        "_closed",
        "_ended",
        "_failure",
        "_fragments",
        "_fragments_opcode",
        "_fragments_size",
        "_handler",
        "_keepalive",
        "_loop",
        "_max_size",
        "_opened",
        "_owner",
        "_paused",
        "_subprotocols",
        "_timer",
        "_transport",
        "_ws",
        "active",
        "idle_since",
        "ping_sent_at",
    )

    def __init__(
        self,
        handler: UpstreamHandler,
        keepalive: KeepaliveRegistry | None,
        loop: asyncio.AbstractEventLoop,
        target: Target,
    ) -> None:
        self._owner = handler
        self._handler: UpstreamHandler = _NOT_YET
        """Where messages go: the owner's handler once the handshake is accepted, a sink that
        drops them once the connection was failed (what follows a protocol error is not
        data)."""
        self._keepalive = keepalive
        self._loop = loop
        self._max_size = target.max_size
        self._subprotocols = target.subprotocols
        self._ws: WSTransport | None = None
        """picows' side of the connection (set by the handshake's answer)."""
        self._transport: asyncio.Transport | None = None
        self._failure: InvalidHandshake | None = None
        self._opened: asyncio.Future[None] | None = loop.create_future()
        """Settled by the handshake's answer (or the socket's end before it), then dropped:
        the answer may come before the opener awaits it."""
        self._closed: asyncio.Future[Closed] = loop.create_future()
        self._ended: Closed | None = None
        """The first close frame either way (code, reason, who sent it)."""
        self._close_sent = False
        self._batch: list[Frame] = []
        self._fragments: list[bytes] | None = None
        self._fragments_opcode = TEXT
        self._fragments_size = 0
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        self.active = False
        """Set by every frame read; the keepalive clears it (``keepalive.visit``)."""
        self.idle_since = loop.time()
        self.ping_sent_at = 0.0
        """When the keepalive ping still unanswered was sent (0: none is)."""

    # --- what the opener and the owner call ----------------------------------------------------

    def listener(self) -> PicowsTransport:
        """picows' listener factory: this object, once the handshake's answer is a 101."""
        return self

    async def handshake_done(self, protocol: WSProtocol) -> None:
        """Return once the upstream accepted the handshake on ``protocol``; raise what failed
        it (also when the answer came before this call)."""
        self._transport = protocol.transport.underlying_transport
        opened = self._opened
        assert opened is not None
        try:
            await opened
        finally:
            self._opened = None

    def socket_gone(self, protocol: WSProtocol) -> None:
        """The socket is closed (:class:`_ClientProtocol`): a handshake still waiting for
        its answer failed; picows' error says how."""
        opened = self._opened
        if opened is None or opened.done():
            return
        waiter = protocol.wait_until_handshake_complete()
        try:
            waiter.send(None)  # settled: returns or raises without suspending
        except WSHandshakeError as exc:
            opened.set_exception(refusal(exc))
        except WSError as exc:
            opened.set_exception(InvalidHandshake(f"invalid handshake answer ({exc})"))
        except StopIteration:  # closed before the answer
            opened.set_exception(
                ConnectionResetError("upstream closed the connection during the handshake")
            )
        except Exception as exc:  # picows' own handshake timer, or its bug
            opened.set_exception(exc)
        finally:
            waiter.close()
        opened.exception()  # an opener that stopped waiting is not told

    @property
    def is_open(self) -> bool:
        """True between a successful handshake and the start of the closing handshake."""
        return self._handler is self._owner and not self._close_sent and self._ended is None

    def send_text(self, text: str) -> None:
        """See :meth:`UpstreamTransport.send_text`."""
        transport = self._ws
        if transport is None or not self.is_open:
            raise ConnectionError("the upstream connection is not open")
        transport.send(_TEXT, text.encode())

    def close(self, code: int, reason: str = "") -> None:
        """See :meth:`UpstreamTransport.close`."""
        if self.is_open:
            self._send_close(code, reason)
        elif self._ws is None:
            self.abort()

    def fail(self, code: int, reason: str) -> None:
        """Fail the connection as websockets does on a protocol error: send ``code``, drop
        what follows (messages already read in the same batch are delivered), wait (bounded)
        for the upstream to close."""
        if not self.is_open:
            return
        self._flush()
        self._handler = _DROPPED
        self._fragments = None
        self._send_close(code, reason)

    def abort(self) -> None:
        """See :meth:`UpstreamTransport.abort`."""
        raw = self._transport
        if raw is not None:
            raw.abort()

    def keepalive_ping(self) -> None:
        """Send the shared keepalive's ping."""
        if self._ws is not None:
            self._ws.send_ping(KEEPALIVE_PING)

    # --- picows' callbacks ---------------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        self._ws = transport
        opened = self._opened
        self._failure = negotiation_failure(transport.response.headers, self._subprotocols)
        if self._failure is not None:
            if opened is not None and not opened.done():
                opened.set_exception(self._failure)
            self.abort()  # the answer accepted what was not offered
            return
        self._handler = self._owner
        # picows keeps the handshake's request and answer for as long as the connection lives.
        # What they said is checked by now; their headers would cost every held stream over a
        # kilobyte, and the request's carry the profile's resolved secrets.
        transport.request.headers.clear()
        transport.response.headers.clear()
        if opened is not None and not opened.done():
            opened.set_result(None)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        self.active = True
        msg_type = frame.msg_type
        if msg_type is _TEXT:
            opcode = TEXT
        elif msg_type is _BINARY:
            opcode = BINARY
        else:
            self._other_frame(frame, msg_type)
            return
        if frame.fin and self._fragments is None and not frame.rsv1:
            message = Frame(opcode, frame.get_payload_as_bytes())
            if frame.last_in_buffer:  # the read's last frame: hand the batch over
                batch = self._batch
                if batch:
                    batch.append(message)
                    self._batch = []
                    self._handler.messages_received(batch)
                else:
                    self._handler.messages_received([message])
            else:
                self._batch.append(message)
            return
        self._fragment_start(frame, opcode)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._keepalive is not None:
            self._keepalive.discard(self)
        self._batch = []
        if self._ended is None and transport.is_close_frame_sent and not self._close_sent:
            # picows failed the connection (a frame over max_size: 1009; a protocol error:
            # 1002); its error is readable once its disconnect is complete.
            self._loop.call_soon(self._end_after_library_close, transport)
            return
        self._end(self._ended or Closed(1006, "", CloseBy.NETWORK))

    # --- internals -----------------------------------------------------------------------------

    def _other_frame(self, frame: WSFrame, msg_type: WSMsgType) -> None:
        """A control frame or a continuation (the batch is handed over if it was the read's
        last)."""
        if msg_type is _CONTINUATION:
            self._fragment_continue(frame)
        elif msg_type is _PING:
            transport = self._ws
            if transport is not None and not self._close_sent:
                transport.send_pong(frame.get_payload_as_bytes())
        elif msg_type is _CLOSE:
            self._close_received(frame)
        elif msg_type is not _PONG:  # ``active`` says enough of a pong
            self.fail(1002, "invalid opcode")
        if frame.last_in_buffer:
            self._flush()

    def _fragment_start(self, frame: WSFrame, opcode: Opcode) -> None:
        """A data frame that is not a whole message by itself (or one picows let through
        that websockets refuses)."""
        if frame.rsv1:
            self.fail(1002, "reserved bit set without an extension")
        elif self._fragments is not None:
            self.fail(1002, "expected a continuation frame")
        else:
            payload = frame.get_payload_as_bytes()
            self._fragments = [payload]
            self._fragments_opcode = opcode
            self._fragments_size = len(payload)
        if frame.last_in_buffer:
            self._flush()

    def _fragment_continue(self, frame: WSFrame) -> None:
        fragments = self._fragments
        if fragments is None:
            self.fail(1002, "unexpected continuation frame")
            return
        payload = frame.get_payload_as_bytes()
        self._fragments_size += len(payload)
        if self._fragments_size > self._max_size:
            self.fail(1009, f"over size limit ({self._fragments_size} > {self._max_size} bytes)")
            return
        fragments.append(payload)
        if frame.fin:
            self._fragments = None
            self._batch.append(Frame(self._fragments_opcode, b"".join(fragments)))

    def _close_received(self, frame: WSFrame) -> None:
        """The upstream's close frame: what came before it in this read is handed over, what
        follows is dropped; it is echoed (unless ours went first) and the socket closed."""
        code = frame.get_close_code().value or 1005  # no status in the frame
        message = frame.get_close_message()
        reason = message.decode("utf-8", "replace") if message else ""
        if self._ended is None:
            self._ended = Closed(code, reason, CloseBy.UPSTREAM)
        self._flush()
        self._handler = _DROPPED
        transport = self._ws
        if transport is None:
            return
        if not self._close_sent:
            self._close_sent = True
            transport.send(_CLOSE, frame.get_payload_as_bytes())  # the echo, as received
        # The closing handshake is over. The server should end TCP first; waiting for it
        # would keep a socket for nothing.
        transport.disconnect()

    def _send_close(self, code: int, reason: str) -> None:
        transport = self._ws
        assert transport is not None
        self._close_sent = True
        if self._ended is None:
            self._ended = Closed(code, reason, CloseBy.WORKER)
        transport.send_close(WSCloseCode(code), reason.encode())
        if self._timer is None:
            self._timer = self._loop.call_later(CLOSE_TIMEOUT_SECONDS, self.abort)
        if self._paused:  # the upstream's close arrives as data
            self._paused = False
            raw = self._transport
            if raw is not None and not raw.is_closing():
                raw.resume_reading()

    def _flush(self) -> None:
        batch = self._batch
        if batch:
            self._batch = []
            self._handler.messages_received(batch)

    def _end_after_library_close(self, transport: WSTransport) -> None:
        code = library_close_code(transport)
        reason = "message too big" if code == 1009 else "protocol error"
        self._end(Closed(code, reason, CloseBy.WORKER))

    def _end(self, closed: Closed) -> None:
        self._closed.set_result(closed)
        if self._ws is not None and self._failure is None:
            self._owner.connection_closed(closed)


class _Dropped:
    """The handler of a connection that was failed, or not yet accepted: messages go nowhere."""

    def messages_received(self, messages: list[Frame]) -> None:
        pass

    def connection_closed(self, closed: Closed) -> None:
        pass


_DROPPED: Final = _Dropped()
_NOT_YET: Final = _DROPPED
