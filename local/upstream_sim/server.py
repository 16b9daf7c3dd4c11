"""The simulator's WebSocket server: handshakes, faults, statistics and the streaming loop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import http
import logging
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any, Final, NamedTuple
from urllib.parse import quote, unquote, urlencode, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidHeader
from websockets.headers import parse_subprotocol
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from local.upstream_sim.client_session import ClientSession
from local.upstream_sim.emitter import Emitter, Pacer, send_flat_out
from local.upstream_sim.knobs import ALL_STREAMS, DEFAULT_RATE, Fault, Knobs, StreamStats
from local.upstream_sim.payloads import subscribed_message
from worker.os_limits import raise_open_file_limit

LISTEN_BACKLOG: Final = 4096
_UNSENDABLE_CODES: Final = frozenset({1005, 1006, 1015})  # reserved: never put on the wire


class _NoDebugLog(logging.LoggerAdapter[logging.Logger]):
    """websockets' server logger without its DEBUG level, which logs request lines and headers
    and with them bearer tokens (query and ``Authorization``); INFO and above as configured."""

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


_WIRE_LOG: Final = _NoDebugLog(logging.getLogger("websockets.server"))


class _Refusal(NamedTuple):
    """A handshake the simulator answers with an HTTP error instead of 101."""

    status: int
    body: str


_AUTH_REFUSAL: Final = _Refusal(http.HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token\n")
_SUBPROTOCOL_REFUSAL: Final = _Refusal(
    http.HTTPStatus.BAD_REQUEST, "the required subprotocol was not offered\n"
)


class UpstreamSimulator:
    """The simulator server. Public methods are thread-safe unless they are coroutines."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        default_rate: float = DEFAULT_RATE,
        resume_param: str = "from_seq",
    ) -> None:
        self.host = host
        self.port = port
        self.default_rate = default_rate
        self.resume_param = resume_param
        self._lock = threading.Lock()
        self._stats: dict[str, StreamStats] = {}
        self._faults: dict[str, Fault] = {}
        self._open: dict[str, set[ServerConnection]] = {}
        self._plans: weakref.WeakKeyDictionary[ServerConnection, tuple[str, Knobs]] = (
            weakref.WeakKeyDictionary()
        )
        self._server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._enders: set[asyncio.Task[None]] = set()
        self._pacer = Pacer()
        self._pacer_task: asyncio.Task[None] | None = None

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen; afterwards :attr:`port` is the bound port (useful with ``port=0``)."""
        raise_open_file_limit()
        self._loop = asyncio.get_running_loop()
        self._pacer_task = self._loop.create_task(self._pacer.run(), name="upstream-sim-pacer")
        self._server = await serve(
            self._handle,
            self.host,
            self.port,
            process_request=self._process_request,
            select_subprotocol=self._select_subprotocol,
            logger=_WIRE_LOG,
            compression=None,
            ping_interval=None,  # clients ping; the simulator only answers
            max_size=2**16,
            backlog=LISTEN_BACKLOG,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, close_code: int | None = 1012) -> None:
        """Stop listening and end every connection: close with ``close_code`` or, for ``None``,
        abort (1006). The default 1012 (service restart) tells clients to come back later."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close(close_connections=False)
        await asyncio.gather(*(self._end(c, close_code) for c in list(server.connections)))
        await server.wait_closed()
        if self._pacer_task is not None:
            self._pacer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pacer_task

    async def __aenter__(self) -> UpstreamSimulator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- test API --------------------------------------------------------------------------

    def url_for(self, stream_id: str, /, *, host: str | None = None, **query: Any) -> str:
        """``ws://host:port/<stream id>?<query>``; the stream id is percent-encoded."""
        base = f"ws://{host or self.host}:{self.port}/{quote(stream_id, safe='')}"
        return f"{base}?{urlencode(query)}" if query else base

    def set_fault(self, stream_id: str, *, times: int | None = None, **knobs: Any) -> None:
        """Override knobs (any :class:`Knobs` field: ``drop_after``, ``reject``, ``close_code``,
        ``bearer``, ``subscribe``, ...) for the next ``times`` connections of ``stream_id``
        (``None``: until cleared; ``ALL_STREAMS``: every stream). Raises ``ValueError`` for an
        unknown knob; a bad value is answered with 400 when a connection meets it."""
        unknown = set(knobs) - {f.name for f in dataclasses.fields(Knobs)}
        if unknown:
            raise ValueError(f"unknown knobs: {sorted(unknown)}")
        with self._lock:
            self._faults[stream_id] = Fault(knobs=dict(knobs), remaining=times)

    def clear_faults(self, stream_id: str | None = None) -> None:
        """Remove the fault of ``stream_id``, or every fault when ``None``."""
        with self._lock:
            if stream_id is None:
                self._faults.clear()
            else:
                self._faults.pop(stream_id, None)

    def stats(self, stream_id: str) -> StreamStats:
        """A copy of what the simulator saw for ``stream_id`` (zeros if nothing)."""
        with self._lock:
            current = self._stats.get(stream_id, StreamStats())
            return dataclasses.replace(
                current,
                from_seqs=list(current.from_seqs),
                attempt_times=list(current.attempt_times),
                close_codes_received=list(current.close_codes_received),
                subprotocols=list(current.subprotocols),
                subscriptions=list(current.subscriptions),
            )

    def attempts(self, stream_id: str) -> int:
        """Handshake requests seen for ``stream_id`` (for "no tight reconnect loop" checks)."""
        with self._lock:
            current = self._stats.get(stream_id)
            return current.attempts if current else 0

    def disconnect(self, stream_id: str, close_code: int | None = None) -> None:
        """End every open connection of ``stream_id``: abort (``None``) or close with a code."""
        loop = self._loop
        if loop is None:
            return
        with self._lock:
            connections = list(self._open.get(stream_id, ()))
        for connection in connections:
            coro = self._end(connection, close_code)
            if _on_loop(loop):
                task = loop.create_task(coro)
                self._enders.add(task)
                task.add_done_callback(self._enders.discard)
            else:
                asyncio.run_coroutine_threadsafe(coro, loop)

    # --- server side -----------------------------------------------------------------------

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        parts = urlsplit(request.path)
        stream_id = unquote(parts.path[1:])
        if not stream_id:
            return connection.respond(http.HTTPStatus.NOT_FOUND, "no stream id in the path\n")
        try:
            knobs = Knobs.from_query(parts.query, self.resume_param, self.default_rate)
            knobs = self._apply_fault(stream_id, knobs)
        except (TypeError, ValueError):
            return connection.respond(http.HTTPStatus.BAD_REQUEST, "bad simulator knob\n")
        refusal = _refusal(knobs, request.headers)
        with self._lock:
            stats = self._stats.setdefault(stream_id, StreamStats())
            stats.attempts += 1
            stats.attempt_times.append(time.monotonic())
            stats.last_host_header = request.headers.get("Host", "")
            if refusal is not None:
                stats.rejected += 1
                stats.auth_failures += refusal is _AUTH_REFUSAL
                stats.subprotocol_failures += refusal is _SUBPROTOCOL_REFUSAL
        if refusal is not None:
            response = connection.respond(refusal.status, refusal.body)
            if refusal is _AUTH_REFUSAL:
                response.headers["WWW-Authenticate"] = "Bearer"
            return response
        if knobs.last_event_id:
            knobs = _resumed_after_header(knobs, request.headers)
        self._plans[connection] = (stream_id, knobs)
        return None

    def _select_subprotocol(
        self, connection: ServerConnection, offered: Sequence[Subprotocol]
    ) -> Subprotocol | None:
        """The ``subprotocol`` knob when the client offered it (checked before), else none."""
        plan = self._plans.get(connection)
        wanted = plan[1].subprotocol if plan is not None else None
        return Subprotocol(wanted) if wanted is not None and wanted in offered else None

    def _apply_fault(self, stream_id: str, knobs: Knobs) -> Knobs:
        with self._lock:
            key = stream_id if stream_id in self._faults else ALL_STREAMS
            fault = self._faults.get(key)
            if fault is None:
                return knobs
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    del self._faults[key]
        merged = dataclasses.replace(knobs, **fault.knobs)
        merged.validate()
        return merged

    async def _handle(self, connection: ServerConnection) -> None:
        stream_id, knobs = self._plans.pop(connection)
        with self._lock:
            stats = self._stats[stream_id]
            stats.accepted += 1
            stats.open += 1
            stats.from_seqs.append(knobs.from_seq)
            stats.subprotocols.append(connection.subprotocol)
            self._open.setdefault(stream_id, set()).add(connection)
        try:
            if knobs.interactive:
                await self._serve_interactive(connection, stream_id, knobs, stats)
            else:
                await self._stream(connection, stream_id, knobs, stats)
        finally:
            received = connection.protocol.close_rcvd
            with self._lock:
                stats.open -= 1
                stats.close_codes_received.append(received.code if received else None)
                self._open[stream_id].discard(connection)

    async def _stream(
        self, connection: ServerConnection, stream_id: str, knobs: Knobs, stats: StreamStats
    ) -> None:
        """Send the stream from ``knobs.from_seq`` as the knobs say, then wait for the close."""
        emitter = Emitter(connection, stream_id, knobs, stats, self._lock, self._now())
        try:
            if knobs.rate > 0:
                self._pacer.add(emitter)
                await asyncio.wait(
                    [emitter.done, connection.connection_lost_waiter],
                    return_when=asyncio.FIRST_COMPLETED,
                )
                emitter.finish()  # the connection may have gone first: stop pacing it
            else:
                await send_flat_out(emitter)
            if emitter.limit_reached:
                await self._end(connection, emitter.end_code)
            await connection.wait_closed()
        except (ConnectionError, RuntimeError):
            pass  # the client went away while a frame was on its way

    async def _serve_interactive(
        self, connection: ServerConnection, stream_id: str, knobs: Knobs, stats: StreamStats
    ) -> None:
        """A client that logs in, subscribes or must ping (:mod:`client_session`): send nothing
        until it may start, then (after the ``ack``) stream from where it asked. Client
        messages are read until the connection ends."""
        session = ClientSession(connection, knobs, stats, self._lock)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(session.read())
            if knobs.ping_within is not None:
                tasks.create_task(session.watch_pings())
            start = await session.ready()
            if start is None:
                return  # gone (or refused) before it could start; the tasks end with it
            if knobs.ack:
                try:
                    await connection.send(subscribed_message(start).decode())
                except ConnectionClosed:
                    return
            await self._stream(
                connection, stream_id, dataclasses.replace(knobs, from_seq=start), stats
            )

    def _now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    @staticmethod
    async def _end(connection: ServerConnection, close_code: int | None) -> None:
        if close_code is None or close_code in _UNSENDABLE_CODES:
            connection.transport.abort()
        else:
            await connection.close(close_code, "simulated")


def _refusal(knobs: Knobs, headers: Headers) -> _Refusal | None:
    """Why a handshake is refused, checked in this order: ``reject``, the bearer token, the
    subprotocol; ``None`` to accept it."""
    if knobs.reject is not None:
        return _Refusal(knobs.reject, "rejected by the simulator\n")
    if knobs.bearer is not None and not _bearer_matches(headers, knobs.bearer):
        return _AUTH_REFUSAL
    if knobs.subprotocol is not None and knobs.subprotocol not in _offered_subprotocols(headers):
        return _SUBPROTOCOL_REFUSAL
    return None


def _resumed_after_header(knobs: Knobs, headers: Headers) -> Knobs:
    """``last_event_id``: replay after the ``Last-Event-ID`` header's seq when it holds one."""
    value = headers.get("Last-Event-ID", "")
    if not value.isdigit():
        return knobs
    return dataclasses.replace(knobs, from_seq=int(value) + 1)


def _bearer_matches(headers: Headers, token: str) -> bool:
    """One ``Authorization: Bearer <token>`` header (scheme in any case), compared in constant
    time."""
    values = headers.get_all("Authorization")
    if len(values) != 1:
        return False
    scheme, _, credentials = values[0].partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.encode(), token.encode())


def _offered_subprotocols(headers: Headers) -> list[str]:
    """Subprotocols in the ``Sec-WebSocket-Protocol`` headers; none when they do not parse."""
    try:
        return [
            protocol
            for value in headers.get_all("Sec-WebSocket-Protocol")
            for protocol in parse_subprotocol(value)
        ]
    except InvalidHeader:
        return []


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
