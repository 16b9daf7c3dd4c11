"""The upstream transport seam: one WebSocket connection that calls back with batches.

An :class:`UpstreamTransport` is all the rest of the worker knows of a connection. It is opened
to an address the URL policy has already checked (:func:`worker.stream.connection.connect_upstream`,
a :class:`Target`); it hands its :class:`UpstreamHandler` every complete message that one read of
the socket produced — a *batch*: a list of websockets :class:`~websockets.frames.Frame`
objects, each a whole text or binary message — and, once, how the connection closed
(:class:`Closed`: code, reason, who closed first). It can pause and resume reading, send a text
message (a profile's open message) and close. Nothing awaits per message: a batch is handled
inside the read callback.

The default implementation is :mod:`worker.stream.websocket` (websockets' own sans-I/O client
on the event loop's transport); :mod:`worker.stream.picows_client` is the other (picows'
compiled framing), chosen by ``Settings.upstream_library``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Protocol

from websockets.frames import Frame
from websockets.uri import WebSocketURI


class CloseBy(StrEnum):
    """Which side ended a connection."""

    UPSTREAM = "upstream"
    """The upstream's close frame came first."""
    WORKER = "worker"
    """Ours came first: the owner's close, a keepalive timeout (1011), a message over the size
    limit (1009), a protocol error the library found (1002, 1007)."""
    NETWORK = "network"
    """No close frame either way: the TCP connection ended (reported as 1006)."""


@dataclass(frozen=True, slots=True)
class Closed:
    """How a connection ended. ``reason`` is the upstream's own text when it closed first:
    never log or store it."""

    code: int
    reason: str
    by: CloseBy


class UpstreamHandler(Protocol):
    """What a transport calls back, always from the event loop."""

    def messages_received(self, messages: list[Frame]) -> None:
        """Every message one read completed, in order: whole text or binary messages (a
        fragmented one assembled). Must not block; may pause reading or close."""
        ...

    def connection_closed(self, closed: Closed) -> None:
        """The connection is over (called once, after the handshake had succeeded)."""
        ...


class UpstreamTransport(Protocol):
    """One open upstream connection (see the module docstring)."""

    async def wait_closed(self) -> Closed:
        """Return how the connection ended, once it has."""
        ...

    def pause_reading(self) -> None:
        """Read nothing more until :meth:`resume_reading` (the socket's buffers fill, then TCP
        slows the upstream down). Idempotent."""
        ...

    def resume_reading(self) -> None:
        """Read again. Idempotent."""
        ...

    def send_text(self, text: str) -> None:
        """Send one text message. Raises ``ConnectionError`` when the connection is not open."""
        ...

    def close(self, code: int, reason: str = "") -> None:
        """Start the closing handshake with ``code`` (the socket is dropped if it outlasts
        a few seconds); before the handshake completed, drop it at once."""
        ...

    def abort(self) -> None:
        """Drop the socket now, without a close frame."""
        ...


class SocketConnection:
    """What both transports do alike, as a base of theirs: pausing the socket's reading and the
    end's future. The transport sets ``_transport`` (the loop's, None until connected),
    ``_paused`` and ``_closed``."""

    __slots__ = ()  # the transport's own slots hold the state (the ignores below: mypy's view)
    _transport: asyncio.Transport | None
    _paused: bool
    _closed: asyncio.Future[Closed]

    async def wait_closed(self) -> Closed:
        """How the connection ended, once it has (cancelling the wait changes nothing)."""
        return await asyncio.shield(self._closed)

    @property
    def reading_paused(self) -> bool:
        """True while reading is paused (by :meth:`pause_reading`)."""
        return self._paused

    def pause_reading(self) -> None:
        """See :meth:`UpstreamTransport.pause_reading`."""
        transport = self._transport
        if not self._paused and transport is not None and not transport.is_closing():
            self._paused = True  # type: ignore[misc]
            transport.pause_reading()

    def resume_reading(self) -> None:
        """See :meth:`UpstreamTransport.resume_reading`."""
        transport = self._transport
        if self._paused and transport is not None and not transport.is_closing():
            self._paused = False  # type: ignore[misc]
            transport.resume_reading()


@cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every upstream: the system's trust store, certificates and host
    names verified (one context per process: building one reads the trust store)."""
    return ssl.create_default_context()


async def connect_socket(
    target: Target, uri: WebSocketURI, protocol: Callable[[], asyncio.BaseProtocol]
) -> asyncio.BaseProtocol:
    """Open the socket of ``target`` and return its protocol (made by ``protocol()``): to the
    checked address (never a fresh lookup of the host), TLS for ``wss`` with the URL's host as
    SNI and the name certificates are verified against."""
    tls = tls_context() if uri.secure else None
    _, made = await asyncio.get_running_loop().create_connection(
        protocol,
        host=target.address,
        port=uri.port,
        ssl=tls,
        server_hostname=uri.host if tls is not None else None,
    )
    return made


@dataclass(frozen=True)
class Target:
    """Where and how to open one connection: ``uri`` (``ws[s]://host[:port]/resource``, the
    host as in the URL: it goes into ``Host`` and TLS's SNI), the checked ``address`` the socket
    goes to, handshake ``headers`` (secrets resolved), ``subprotocols`` to offer, and
    ``max_size``, the largest message accepted in bytes."""

    uri: str
    address: str
    headers: Sequence[tuple[str, str]] = ()
    subprotocols: Sequence[str] = ()
    max_size: int = 1_000_000
