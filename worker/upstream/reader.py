"""The reconnecting message source of one upstream stream (see :mod:`worker.upstream`)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, NamedTuple

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.frames import Frame

from streamlease.errors import UpstreamRejected, UrlRejected
from streamlease.profile import DEFAULT_PROFILE, Profile
from streamlease.rules import backoff_seconds
from streamlease.schema import PayloadEncoding
from streamlease.seqs import is_valid_seq, seq_problem
from streamlease.settings import Settings
from streamlease.url_policy import UrlPolicy
from worker.upstream.connection import (
    Failure,
    Resolver,
    close_connection,
    connect_upstream,
    describe_close,
    describe_connect_error,
)

try:
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - orjson ships in the worker image

    def _loads(frame: bytes) -> Any:
        return json.loads(frame.decode("utf-8"))


class UpstreamMessage(NamedTuple):
    """One upstream message, as delivered: ``payload`` is the frame's raw bytes — a UTF-8 JSON
    object (``encoding`` ``json``), any text (``text``), or a binary frame (``base64``: how the
    sink will carry it) — and ``received_at_ms`` wall-clock epoch milliseconds."""

    seq: int
    received_at_ms: int
    payload: bytes
    encoding: str = PayloadEncoding.JSON


class UpstreamEventKind(StrEnum):
    """What an :class:`UpstreamEvent` reports."""

    CONNECTED = "connected"
    RETRYING = "retrying"
    """A connect failed or a connection dropped; the next attempt follows ``delay_seconds``."""
    REJECTED = "rejected"
    """Fatal: the iteration raises :class:`UpstreamRejected` next."""
    ENDED = "ended"
    """The upstream closed with 1000 (the stream is finished); the iteration stops."""
    GAP = "gap"
    """``missing`` seqs were skipped before ``seq``."""
    MALFORMED = "malformed"
    """A frame had no integer sequence where the profile says, one outside
    ``0 .. MAX_SEQ`` (:mod:`streamlease.seqs`), or was binary where a JSON document was
    expected; it was skipped."""


@dataclass(frozen=True, slots=True)
class UpstreamEvent:
    """Reported to the reader's ``on_event`` hook. ``error`` is safe to store and log."""

    kind: UpstreamEventKind
    stream_id: str
    error: str = ""
    close_code: int | None = None
    status: int | None = None
    """HTTP status of a refused handshake."""
    delay_seconds: float = 0.0
    attempt: int = 0
    """Consecutive failures so far (``RETRYING``); connections so far (``CONNECTED``)."""
    seq: int = 0
    missing: int = 0


@dataclass(slots=True)
class UpstreamStats:
    """Counters of one reader since it was created."""

    connects: int = 0
    retries: int = 0
    messages: int = 0
    duplicates: int = 0
    gaps: int = 0
    missing: int = 0
    malformed: int = 0


class HeadersUnavailable(Exception):
    """The handshake headers cannot be had for now (a secret not readable yet): retry later.
    Its text is safe to store and log."""


def _received_frames(ws: ClientConnection) -> deque[Frame] | None:
    """The frames ``ws`` received and nobody read yet, oldest first: websockets 17's assembler
    keeps them in a deque. None for any other layout (then each message is read with ``recv``)."""
    frames = getattr(getattr(ws.recv_messages, "frames", None), "queue", None)
    if isinstance(frames, deque) and callable(getattr(ws.recv_messages, "maybe_resume", None)):
        return frames
    return None


async def _send_opening(ws: ClientConnection, text: str) -> None:
    """Send the profile's open message; a connection that cannot take it failed."""
    try:
        await ws.send(text)
    except ConnectionClosed as exc:
        raise OSError("upstream closed before the open message was sent") from exc


# --- the reader ------------------------------------------------------------------------------


class UpstreamReader:
    """Messages of one upstream stream, in ``seq`` order, across reconnects.

    Use as ``async with UpstreamReader(...) as reader: async for message in reader: ...``.
    Messages with ``seq <= last_seq`` are dropped (a replay overlap), gaps and malformed frames
    are counted and reported, and the reader reconnects by itself until the upstream ends the
    stream (iteration stops, :attr:`upstream_ended`), refuses it for good
    (:class:`UpstreamRejected`), or the owner calls :meth:`close` (iteration stops).

    ``on_event`` is called synchronously for every :class:`UpstreamEvent`; it must neither block
    nor raise (an exception would end the iteration). Count ``RETRYING`` events as reconnects,
    store the ``error`` of ``RETRYING``/``REJECTED`` as ``last_error``.
    ``profile`` (:class:`~streamlease.profile.Profile`) says where the sequence is (a JSON path,
    or none: messages are numbered from ``last_seq + 1``, text and binary frames alike), how a
    reconnect resumes, which subprotocols to offer and what to send after each connect;
    ``headers()`` gives the handshake headers before each attempt (secrets resolved; it may
    raise :class:`UpstreamRejected`, or :class:`HeadersUnavailable` to be retried).
    ``rand`` (uniform in [0, 1)), ``clock`` (monotonic seconds) and ``resolver`` are injectable
    for tests.
    """

    def __init__(
        self,
        stream_id: str,
        url: str,
        settings: Settings,
        *,
        last_seq: int = 0,
        on_event: Callable[[UpstreamEvent], None] | None = None,
        policy: UrlPolicy | None = None,
        resolver: Resolver | None = None,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        profile: Profile = DEFAULT_PROFILE,
        headers: Callable[[], Awaitable[Sequence[tuple[str, str]]]] | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.stats = UpstreamStats()
        self.upstream_ended = False
        """True once the upstream closed with 1000 (it finished the stream)."""
        self.end_reason: str | None = None
        """Why the iteration stopped (sanitized), ``None`` while it runs."""
        self._url = url
        self._settings = settings
        self._policy = policy or UrlPolicy.from_settings(settings)
        self._resolver = resolver
        self._rand = rand
        self._clock = clock
        self._on_event = on_event
        self._last_seq = last_seq
        self._profile = profile
        self._seq_path = profile.seq_path
        self._decode: bool | None = False if profile.seq_path is not None else None
        """Frames of a feed with sequence numbers are parsed from bytes; without, text frames
        are told from binary ones."""
        self._headers = headers
        self._ws: ClientConnection | None = None
        self._failures = 0  # consecutive, drives the backoff
        self._connected_at = 0.0
        self._close_requested = asyncio.Event()
        self._close_code = 1000
        self._done = False

    @property
    def last_seq(self) -> int:
        """The last ``seq`` delivered (or the ``last_seq`` the reader started from)."""
        return self._last_seq

    @property
    def connected(self) -> bool:
        """Whether a connection is open right now."""
        return self._ws is not None

    async def __aenter__(self) -> UpstreamReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(1000 if exc_type is None else 1001)

    def __aiter__(self) -> UpstreamReader:
        return self

    async def __anext__(self) -> UpstreamMessage:
        batch = await self.next_batch(1)
        if not batch:
            raise StopAsyncIteration
        return batch[0]

    async def next_batch(self, limit: int) -> list[UpstreamMessage]:
        """The next message (waiting for it, across reconnects), followed by those already
        received behind it, up to ``limit``: never waits for a second one. Empty once the
        iteration stopped (see the class docstring)."""
        parse, decode = self._parse, self._decode
        try:
            while True:
                ws = self._ws
                if ws is None:
                    ws = await self._reconnect()
                try:
                    first = parse(await ws.recv(decode=decode))
                except ConnectionClosed as exc:
                    await self._after_close(exc)
                    continue
                if first is not None:
                    break
        except StopAsyncIteration:
            return []
        batch = [first]
        if limit == 1:
            return batch
        buffered = _received_frames(ws)
        if buffered is None:
            return batch
        # A complete message is next when the first buffered frame is a final one (the first
        # frame of a message is text or binary: control frames are never queued).
        if decode is False:
            # Bytes wanted, no UTF-8 check: taken from the queue directly, as recv would, without
            # its three awaits per message; then reading resumes if the queue had paused it.
            while len(batch) < limit and buffered and buffered[0].fin:
                data = buffered.popleft().data
                message = parse(data if type(data) is bytes else bytes(data))
                if message is not None:
                    batch.append(message)
            ws.recv_messages.maybe_resume()
            return batch
        while len(batch) < limit and buffered and buffered[0].fin:
            try:
                frame = await ws.recv(decode=decode)
            except ConnectionClosed:
                break  # the next call sees it again and reconnects
            message = parse(frame)
            if message is not None:
                batch.append(message)
        return batch

    def _parse(self, frame: bytes | str) -> UpstreamMessage | None:
        """The message a frame carries, or None for a frame that is skipped (reported)."""
        path = self._seq_path
        if path is None:
            # A feed without sequence numbers: every frame, text or binary, is the next
            # message; the number is the reader's own (last_seq + 1).
            if isinstance(frame, str):
                payload, encoding = frame.encode(), PayloadEncoding.TEXT
            else:
                payload, encoding = frame, PayloadEncoding.BASE64
            self._last_seq += 1
            self.stats.messages += 1
            return UpstreamMessage(self._last_seq, time.time_ns() // 1_000_000, payload, encoding)
        assert isinstance(frame, bytes)  # decode=False
        try:
            node = _loads(frame)
            for name in path:
                node = node[name]
        except (ValueError, TypeError, KeyError):
            self._malformed("frame is not a JSON object with a seq where the profile says")
            return None
        seq = node
        if not is_valid_seq(seq):
            self._malformed(seq_problem(seq))
            return None
        stats = self.stats
        last = self._last_seq
        if seq <= last:
            stats.duplicates += 1
            return None
        if seq != last + 1:
            stats.gaps += 1
            stats.missing += seq - last - 1
            self._emit(UpstreamEventKind.GAP, seq=seq, missing=seq - last - 1)
        self._last_seq = seq
        stats.messages += 1
        return UpstreamMessage(seq, time.time_ns() // 1_000_000, frame)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """End the iteration and close the connection with ``code`` (1000: the stream stopped;
        1001: this worker is going away). Idempotent; a concurrent ``__anext__`` stops. Waits at
        most :data:`CLOSE_TIMEOUT_SECONDS` for the closing handshake."""
        if not self._close_requested.is_set():
            self._close_code = code
            self._close_requested.set()
        if not self._done:
            self._finish(f"closed by the owner (close code {self._close_code})")
        ws = self._ws
        if ws is not None:
            await close_connection(ws, self._close_code, reason)

    # --- internals -------------------------------------------------------------------------

    async def _reconnect(self) -> ClientConnection:
        while True:
            self._stop_if_closing()
            try:
                headers = await self._headers() if self._headers is not None else ()
                ws = await connect_upstream(
                    self._url,
                    self._settings,
                    from_seq=self._last_seq + 1,
                    policy=self._policy,
                    resolver=self._resolver,
                    profile=self._profile,
                    headers=headers,
                )
                opening = self._profile.open_message_for(self._last_seq)
                if opening is not None:
                    try:
                        await _send_opening(ws, opening)
                    except BaseException:
                        # Not kept, so dropped here: its keepalive would hold it open otherwise.
                        ws.transport.abort()
                        raise
            except (UrlRejected, UpstreamRejected) as exc:
                self._reject(Failure(True, str(exc)))
            except HeadersUnavailable as exc:
                await self._back_off(Failure(False, str(exc)))
                continue
            except (OSError, WebSocketException) as exc:
                failure = describe_connect_error(exc)
                if failure.fatal:
                    self._reject(failure)
                await self._back_off(failure)
                continue
            if self._close_requested.is_set():
                await close_connection(ws, self._close_code, "")
                self._stop_if_closing()
            self._ws = ws
            self._connected_at = self._clock()
            self.stats.connects += 1
            self._emit(UpstreamEventKind.CONNECTED, attempt=self.stats.connects)
            return ws

    async def _after_close(self, exc: ConnectionClosed) -> None:
        self._ws = None
        self._stop_if_closing()
        failure = describe_close(exc)
        if failure.fatal:
            self.upstream_ended = True
            self._finish(failure.message)
            self._emit(
                UpstreamEventKind.ENDED, error=failure.message, close_code=failure.close_code
            )
            raise StopAsyncIteration
        if self._clock() - self._connected_at >= self._settings.stable_seconds:
            self._failures = 0
        await self._back_off(failure)

    async def _back_off(self, failure: Failure) -> None:
        settings = self._settings
        delay = backoff_seconds(
            self._failures,
            settings.backoff_base_seconds,
            settings.backoff_max_seconds,
            self._rand(),
        )
        self._failures += 1
        self.stats.retries += 1
        self._emit(
            UpstreamEventKind.RETRYING,
            error=failure.message,
            status=failure.status,
            close_code=failure.close_code,
            delay_seconds=delay,
            attempt=self._failures,
        )
        try:
            async with asyncio.timeout(delay):
                await self._close_requested.wait()
        except TimeoutError:
            return

    def _reject(self, failure: Failure) -> None:
        self._finish(failure.message)
        self._emit(UpstreamEventKind.REJECTED, error=failure.message, status=failure.status)
        # No chained cause: websockets' InvalidStatus carries the upstream's headers and body,
        # which a logged traceback would print.
        raise UpstreamRejected(failure.message) from None

    def _stop_if_closing(self) -> None:
        if self._done:
            raise StopAsyncIteration
        if self._close_requested.is_set():
            self._finish(f"closed by the owner (close code {self._close_code})")
            raise StopAsyncIteration

    def _finish(self, reason: str) -> None:
        self._done = True
        self.end_reason = reason

    def _malformed(self, message: str) -> None:
        self.stats.malformed += 1
        self._emit(UpstreamEventKind.MALFORMED, error=message)

    def _emit(self, kind: UpstreamEventKind, **fields: Any) -> None:
        if self._on_event is not None:
            self._on_event(UpstreamEvent(kind, self.stream_id, **fields))
