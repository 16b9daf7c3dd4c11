"""The upstream link of one held stream: connect safely, resume, reconnect with backoff.

An :class:`UpstreamLink` keeps one stream's connection open for as long as its owner wants it,
and knows nothing of leases. Messages never pass through its code: each connection's handler
(:class:`~worker.stream.transport.UpstreamHandler`) has the owner's ``on_messages`` as its very
``messages_received``. The link opens connections, hears of their close, and decides what a
failed connect or a close means.

* **Connect** (:func:`~worker.stream.connection.connect_upstream`): the URL passes the URL policy
  again, every address the host resolves to is checked, and the socket goes to a checked address
  while TLS's SNI and ``Host`` keep the URL's name. No proxy, no redirects, no compression.
* **Resume**: each connect states where the stream is (``resume_from()``, the last seq taken in)
  where the profile puts it — a query parameter, a header, an open message — and sends the
  profile's open messages in order, each awaiting its answer when it asks to
  (:mod:`worker.stream.opening`), with secrets resolved by ``secrets()`` just before. The
  profile's application ping is sent every interval while the connection is open.
* **Reconnect**: exponential backoff with full jitter that resets only after a connection stayed
  up ``settings.stable_seconds`` (an upstream that accepts and drops would see a tight loop).
* **Outcomes** (docs/connecting-feeds.md, "How a connection ends"): close 1000 from the upstream
  ends the link (the stream is finished, :attr:`UpstreamLink.upstream_ended`); a 4xx at the
  handshake (except 408/425/429), a redirect, a refused address, or a refused (or unanswered) open
  message is a *rejection*: reported, then the stream is parked — tried again every
  ``backoff_max_seconds`` with its secrets read afresh, not handed around the fleet; everything
  else (1001, 1006, 1011-1014, 5xx, refused, timeouts, DNS) is retried with backoff. Every outcome
  is reported to ``on_event`` with a short message that never contains the URL, its query or
  upstream text.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from websockets.exceptions import WebSocketException
from websockets.frames import Frame

from streamlease.errors import UpstreamRejected, UrlRejected
from streamlease.profile import DEFAULT_PROFILE, Profile
from streamlease.rules import backoff_seconds
from streamlease.settings import Settings
from streamlease.url_policy import UrlPolicy
from worker.stream.connection import (
    Failure,
    Resolver,
    connect_upstream,
    describe_close,
    describe_connect_error,
)
from worker.stream.keepalive import Keepalive
from worker.stream.opening import (
    AppPinger,
    Connection,
    OpenInterrupted,
    OpenRefused,
    open_connection,
)
from worker.stream.transport import UpstreamTransport
from worker.stream.websocket import CLOSE_TIMEOUT_SECONDS


@functools.lru_cache(maxsize=4)
def _policy_of(settings: Settings) -> UrlPolicy:
    """The URL policy of ``settings``, one object for every link (not one per held stream)."""
    return UrlPolicy.from_settings(settings)


class UpstreamEventKind(StrEnum):
    """What an :class:`UpstreamEvent` reports."""

    CONNECTED = "connected"
    RETRYING = "retrying"
    """A connect failed or a connection dropped; the next attempt follows ``delay_seconds``."""
    REJECTED = "rejected"
    """The upstream refused the stream; the next attempt follows ``delay_seconds``."""
    ENDED = "ended"
    """The upstream closed with 1000 (the stream is finished); the link stops."""


@dataclass(frozen=True, slots=True)
class UpstreamEvent:
    """Reported to the link's ``on_event`` hook. ``error`` is safe to store and log."""

    kind: UpstreamEventKind
    stream_id: str
    error: str = ""
    close_code: int | None = None
    status: int | None = None
    """HTTP status of a refused handshake."""
    delay_seconds: float = 0.0
    attempt: int = 0
    """Consecutive failures so far (``RETRYING``); connections so far (``CONNECTED``)."""


class SecretsUnavailable(Exception):
    """The secrets a connect needs cannot be had for now (throttled, unreachable): retry
    later. Its text is safe to store and log."""


SecretsSource = Callable[[], Awaitable[Mapping[str, str]]]
"""Gives the values of the profile's secrets (reference text → value) before each connect.
May raise :class:`UpstreamRejected`, or :class:`SecretsUnavailable` to be retried."""

ConnectSpan = Callable[[int], AbstractContextManager[object]]
"""Wraps one connect attempt (its number given) until the first connection opened: the stream
start's ``stream.connect`` span (:class:`~worker.tracing.StreamTrace`)."""


class UpstreamLink:
    """One stream's upstream connection, across reconnects (see the module docstring).

    Run :meth:`run` in the owner's task; stop it with :meth:`close` (which closes the current
    connection with the owner's code) or by cancelling :meth:`run` and then calling
    :meth:`close`. ``on_messages(batch)`` gets every batch of every connection (see
    :class:`~worker.stream.transport.UpstreamHandler`); ``resume_from()`` is the last seq the
    stream has taken in; ``on_event`` is
    called synchronously and must neither block nor raise. ``forget_secrets()`` is called when
    the upstream refused the stream (its credentials may have been rotated). ``connect_span``
    wraps each connect attempt before the first connection opened (a trace of the start).
    ``rand`` (uniform in [0, 1)), ``clock`` (monotonic seconds) and ``resolver`` are injectable
    for tests.
    """

    __slots__ = (
        "_clock",
        "_close_code",
        "_close_requested",
        "_closed",
        "_connect_span",
        "_connected_at",
        "_connected_version",
        "_failures",
        "_forget_secrets",
        "_keepalive",
        "_nudge",
        "_on_event",
        "_on_messages",
        "_paused",
        "_pinger",
        "_policy",
        "_profile",
        "_rand",
        "_resolver",
        "_resume_from",
        "_secrets",
        "_settings",
        "_settings_version",
        "_transport",
        "_url",
        "connects",
        "end_reason",
        "retries",
        "stream_id",
        "upstream_ended",
    )

    def __init__(
        self,
        stream_id: str,
        url: str,
        settings: Settings,
        on_messages: Callable[[list[Frame]], None],
        *,
        resume_from: Callable[[], int],
        on_event: Callable[[UpstreamEvent], None] | None = None,
        profile: Profile = DEFAULT_PROFILE,
        secrets: SecretsSource | None = None,
        forget_secrets: Callable[[], None] | None = None,
        keepalive: Keepalive | None = None,
        connect_span: ConnectSpan | None = None,
        policy: UrlPolicy | None = None,
        resolver: Resolver | None = None,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream_id = stream_id
        self.connects = 0
        self.retries = 0
        self.upstream_ended = False
        """True once the upstream closed with 1000 (it finished the stream)."""
        self.end_reason: str | None = None
        """Why the link stopped (sanitized), None while it runs."""
        self._on_messages = on_messages
        self._url = url
        self._settings = settings
        self._resume_from = resume_from
        self._on_event = on_event
        self._profile = profile
        self._secrets = secrets
        self._pinger: AppPinger | None = None
        self._forget_secrets = forget_secrets
        self._keepalive = keepalive
        self._connect_span = connect_span
        self._policy = policy or _policy_of(settings)
        self._resolver = resolver
        self._rand = rand
        self._clock = clock
        self._transport: UpstreamTransport | None = None
        self._paused = False
        self._failures = 0  # consecutive, drives the backoff
        self._connected_at = 0.0
        self._close_requested = False
        """Set by :meth:`close` (a flag: an Event would cost every held stream ~0.7 KiB for a
        wait nobody makes; :attr:`_nudge` wakes what waits)."""
        self._settings_version = 0
        """Counts :meth:`change` calls: a connection made with older settings is replaced."""
        self._connected_version = 0
        self._nudge: asyncio.Future[None] | None = None
        """While waiting for the next attempt (only then: every held stream has a link):
        :meth:`close` and :meth:`change` end the wait early."""
        self._close_code = 1000

    @property
    def connected(self) -> bool:
        """Whether a connection is open right now."""
        return self._transport is not None

    async def run(self) -> None:
        """Connect, and reconnect after every failure, until the upstream ends the stream (then
        :attr:`upstream_ended`) or :meth:`close` is called."""
        while not self._close_requested:
            connected = await self._connect()
            if connected is None:
                return
            # Awaited as it is (a shield would keep a future and two callbacks per held stream):
            # a cancelled wait cancels the connection's own ``closed``, which nothing reads
            # afterwards, and whose handler then leaves it alone.
            closed = await connected.closed
            self._transport = None
            if self._pinger is not None:
                self._pinger.cancel()
                self._pinger = None
            if self._close_requested:
                return
            if self._connected_version != self._settings_version:
                continue  # closed for the new settings: connect with them at once
            failure = describe_close(closed)
            if failure.fatal:
                self.upstream_ended = True
                self.end_reason = failure.message
                self._emit(
                    UpstreamEventKind.ENDED, error=failure.message, close_code=failure.close_code
                )
                return
            if self._clock() - self._connected_at >= self._settings.stable_seconds:
                self._failures = 0
            await self._back_off(UpstreamEventKind.RETRYING, failure)

    def pause_reading(self) -> None:
        """Read nothing until :meth:`resume_reading`, across reconnects."""
        self._paused = True
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again."""
        self._paused = False
        if self._transport is not None:
            self._transport.resume_reading()

    def change(
        self,
        url: str,
        profile: Profile,
        secrets: SecretsSource | None,
        forget_secrets: Callable[[], None] | None,
    ) -> None:
        """Use ``url`` and ``profile`` from the next connect on, and reconnect now: the open
        connection is closed (1000), a wait for the next attempt (a backoff, a parked
        rejection) ends at once. The resume point is ``resume_from()`` as ever."""
        self._url = url
        self._profile = profile
        self._secrets = secrets
        self._forget_secrets = forget_secrets
        self._failures = 0
        self._settings_version += 1
        transport = self._transport
        if transport is not None:
            transport.close(1000, "settings changed")
        self._end_wait()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Stop the link and close the connection with ``code`` (1000: the stream stopped;
        1001: this worker is going away), waiting at most a little longer than the closing
        handshake may take; then the socket is dropped. Idempotent; never raises."""
        if not self._close_requested:
            self._close_code = code
            self._close_requested = True
            self._end_wait()
        if self.end_reason is None:
            self.end_reason = f"closed by the owner (close code {self._close_code})"
        transport = self._transport
        if transport is None:
            return
        transport.close(self._close_code, reason)
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS + 1.0):
                await transport.wait_closed()
        except TimeoutError:
            transport.abort()

    # --- internals -----------------------------------------------------------------------

    async def _connect(self) -> Connection | None:
        """The next open connection (retrying as the outcomes say), or None once closing."""
        settings = self._settings
        while not self._close_requested:
            profile, version = self._profile, self._settings_version
            try:
                secrets = await self._secrets() if self._secrets is not None else {}
                last_seq = self._resume_from()
                connection = Connection(
                    self._on_messages, holding=Connection.holds_for(profile.open_messages)
                )
                with self._span_of_attempt():
                    transport = await connect_upstream(
                        self._url,
                        settings,
                        connection,
                        query=profile.query_for(last_seq, settings.resume_param),
                        policy=self._policy,
                        resolver=self._resolver,
                        profile=profile,
                        headers=profile.headers_for(secrets, last_seq),
                        keepalive=self._keepalive,
                    )
            except (UrlRejected, UpstreamRejected) as exc:
                await self._park(Failure(True, str(exc)))
                continue
            except SecretsUnavailable as exc:
                await self._back_off(UpstreamEventKind.RETRYING, Failure(False, str(exc)))
                continue
            except (OSError, WebSocketException) as exc:
                failure = describe_connect_error(exc)
                if failure.fatal:
                    await self._park(failure)
                else:
                    await self._back_off(UpstreamEventKind.RETRYING, failure)
                continue
            refused = await self._open(transport, connection, profile, secrets, last_seq)
            if refused is not None:
                transport.abort()  # not kept: its keepalive would hold it open otherwise
                if refused.fatal:
                    await self._park(refused)
                else:
                    await self._back_off(UpstreamEventKind.RETRYING, refused)
                continue
            if self._close_requested:
                transport.close(self._close_code)
                return None
            if version != self._settings_version:  # changed meanwhile: connect anew
                transport.abort()
                continue
            self._connected_version = version
            self._transport = transport
            if self._paused:
                transport.pause_reading()
            if profile.ping is not None:
                self._pinger = AppPinger(transport, profile.ping)
            self._connected_at = self._clock()
            self.connects += 1
            self._emit(UpstreamEventKind.CONNECTED, attempt=self.connects)
            return connection
        return None

    async def _open(
        self,
        transport: UpstreamTransport,
        connection: Connection,
        profile: Profile,
        secrets: Mapping[str, str],
        last_seq: int,
    ) -> Failure | None:
        """Send the open messages (awaiting answers); None when the connection is ready for
        data, else how it failed."""
        messages = profile.open_messages
        if not messages:
            return None
        try:
            await open_connection(transport, connection, messages, secrets, last_seq)
        except ConnectionError:
            return Failure(False, "upstream closed before the open message was sent")
        except OpenRefused as exc:
            return Failure(True, str(exc))
        except OpenInterrupted as exc:
            return Failure(False, str(exc), close_code=exc.closed.code)
        return None

    def _span_of_attempt(self) -> AbstractContextManager[object]:
        """The trace span of the next connect attempt: only until a first connection opened
        (later reconnects belong to no start)."""
        if self._connect_span is None or self.connects:
            return contextlib.nullcontext()
        return self._connect_span(self._failures + 1)

    async def _park(self, failure: Failure) -> None:
        """The upstream refused the stream: report it, read the secrets afresh next time, and
        try again after ``backoff_max_seconds``. Handing it to another worker would only make
        the whole fleet knock on the same door."""
        if self._forget_secrets is not None:
            self._forget_secrets()
        delay = self._settings.backoff_max_seconds
        self._emit(
            UpstreamEventKind.REJECTED,
            error=failure.message,
            status=failure.status,
            delay_seconds=delay,
        )
        await self._wait(delay)

    async def _back_off(self, kind: UpstreamEventKind, failure: Failure) -> None:
        settings = self._settings
        delay = backoff_seconds(
            self._failures,
            settings.backoff_base_seconds,
            settings.backoff_max_seconds,
            self._rand(),
        )
        self._failures += 1
        self.retries += 1
        self._emit(
            kind,
            error=failure.message,
            status=failure.status,
            close_code=failure.close_code,
            delay_seconds=delay,
            attempt=self._failures,
        )
        await self._wait(delay)

    async def _wait(self, seconds: float) -> None:
        """Sleep ``seconds`` unless :meth:`close` or :meth:`change` is called first."""
        nudge = self._nudge = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(seconds):
                await nudge
        except TimeoutError:
            return
        finally:
            self._nudge = None

    def _end_wait(self) -> None:
        nudge = self._nudge
        if nudge is not None and not nudge.done():
            nudge.set_result(None)

    def _emit(self, kind: UpstreamEventKind, **fields: Any) -> None:
        if self._on_event is not None:
            self._on_event(UpstreamEvent(kind, self.stream_id, **fields))
