"""A simulated connection whose client has something to say: a login, a subscription, pings.

Shaped after exchanges' feeds: with ``login`` the server greets
(``[{"ev":"status","status":"connected"}]``), waits for ``{"action":"auth","params":KEY}`` (the
knob holds the key's SHA-256) and answers ``auth_success`` — or ``auth_failed`` and close 1008
for another key; with
``subscribe`` it then waits for a subscription (:func:`subscription_start`); with
``ping_within`` it answers ``{"op":"ping"}`` with ``{"op":"pong"}`` and closes (4000) a
connection whose client said nothing for that long (WebSocket pings do not count).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from typing import Any, Final

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from local.upstream_sim.knobs import Knobs, StreamStats
from local.upstream_sim.payloads import subscription_start

GREETING: Final = json.dumps([{"ev": "status", "status": "connected"}])
AUTH_SUCCESS: Final = json.dumps([{"ev": "status", "status": "auth_success"}])
AUTH_FAILED: Final = json.dumps([{"ev": "status", "status": "auth_failed"}])
PONG: Final = '{"op":"pong"}'
LOGIN_REFUSED_CODE: Final = 1008
SILENT_CLIENT_CODE: Final = 4000


class ClientSession:
    """Reads one connection's client messages and says when the stream may start."""

    def __init__(
        self,
        connection: ServerConnection,
        knobs: Knobs,
        stats: StreamStats,
        lock: threading.Lock,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._connection = connection
        self._knobs = knobs
        self._stats = stats
        self._lock = lock
        self._logged_in: asyncio.Future[bool] = loop.create_future()
        if knobs.login is None:
            self._logged_in.set_result(True)
        self._subscribed: asyncio.Future[int] = loop.create_future()
        self._last_heard = loop.time()

    async def ready(self) -> int | None:
        """Where the stream starts once the client logged in and subscribed as the knobs ask;
        None when the connection ended (or the login was refused) first."""
        lost = self._connection.connection_lost_waiter
        if self._knobs.login is not None:
            try:
                await self._connection.send(GREETING)
            except ConnectionClosed:
                return None
            waiters: list[asyncio.Future[Any]] = [self._logged_in, lost]
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if not self._logged_in.done() or not self._logged_in.result():
                return None
        if not self._knobs.subscribe:
            return self._knobs.from_seq
        subscribing: list[asyncio.Future[Any]] = [self._subscribed, lost]
        await asyncio.wait(subscribing, return_when=asyncio.FIRST_COMPLETED)
        return self._subscribed.result() if self._subscribed.done() else None

    async def read(self) -> None:
        """Read client messages until the connection ends."""
        try:
            async for message in self._connection:
                self._last_heard = asyncio.get_running_loop().time()
                await self._heard(message)
        except ConnectionClosed:
            pass

    async def watch_pings(self) -> None:
        """``ping_within``: close a connection whose client stays silent that long."""
        limit = self._knobs.ping_within
        assert limit is not None
        loop = asyncio.get_running_loop()
        lost = self._connection.connection_lost_waiter
        while not lost.done():
            silent = loop.time() - self._last_heard
            if silent >= limit:
                with self._lock:
                    self._stats.ping_timeouts += 1
                await self._connection.close(SILENT_CLIENT_CODE, "no client ping")
                return
            await asyncio.wait([lost], timeout=limit - silent)

    async def _heard(self, message: str | bytes) -> None:
        body = _json(message)
        if body == {"op": "ping"}:
            with self._lock:
                self._stats.client_pings += 1
            await self._connection.send(PONG)
            return
        if not self._logged_in.done():
            if isinstance(body, dict) and body.get("action") == "auth":
                await self._login(body.get("params"))
            else:
                self._ignored()
            return
        start = None
        if self._knobs.subscribe and not self._subscribed.done():
            start = subscription_start(message, self._knobs.from_seq)
        if start is None:
            self._ignored()
            return
        with self._lock:
            self._stats.subscriptions.append(start)
        self._subscribed.set_result(start)

    async def _login(self, key: Any) -> None:
        wanted = self._knobs.login
        assert wanted is not None
        digest = hashlib.sha256(key.encode()).hexdigest() if isinstance(key, str) else ""
        accepted = hmac.compare_digest(digest, wanted)
        with self._lock:
            if accepted:
                self._stats.logins += 1
            else:
                self._stats.login_failures += 1
        if accepted:
            await self._connection.send(AUTH_SUCCESS)
            self._logged_in.set_result(True)
            return
        self._logged_in.set_result(False)
        await self._connection.send(AUTH_FAILED)
        await self._connection.close(LOGIN_REFUSED_CODE, "login refused")

    def _ignored(self) -> None:
        with self._lock:
            self._stats.ignored_messages += 1


def _json(message: str | bytes) -> Any:
    try:
        return json.loads(message)
    except ValueError:
        return None
