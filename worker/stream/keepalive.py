"""Keepalive for every upstream connection of a worker, from one task.

A timer per connection (websockets' own keepalive task) costs every held stream a wake-up per
ping interval whether or not it is silent. Here one task visits every open connection a few
times per interval (:func:`visit`): a
connection that read anything since the last visit is alive and costs nothing more; one silent
for ``ping_interval_seconds`` is pinged, and one still silent ``ping_timeout_seconds`` after
its ping is closed with 1011 (and then reconnected by its stream, as any dropped connection).
The defaults and that outcome are websockets' own: pings every 20 s, 20 s to answer.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

VISITS_PER_INTERVAL: Final = 4
"""How often per ping interval (or timeout, if shorter) each connection is looked at."""
MIN_VISIT_SECONDS: Final = 0.05


class Watched(Protocol):
    """A connection as the keepalive sees it: both upstream transports. It sets ``active`` on
    every read; the keepalive keeps ``idle_since`` and ``ping_sent_at`` (loop time; 0: no ping
    unanswered) on it."""

    active: bool
    idle_since: float
    ping_sent_at: float

    @property
    def is_open(self) -> bool:
        """True between a successful handshake and the start of the closing handshake."""
        ...

    @property
    def reading_paused(self) -> bool:
        """True while its reading is paused (it is not silent then, only unread)."""
        ...

    def fail(self, code: int, reason: str) -> None:
        """Fail the connection with close ``code``."""
        ...

    def keepalive_ping(self) -> None:
        """Send the keepalive's ping."""
        ...


def visit(connection: Watched, now: float, interval_seconds: float, timeout_seconds: float) -> None:
    """One visit of ``connection`` (``now`` in loop time): one silent for ``interval_seconds``
    is pinged; one still silent ``timeout_seconds`` after the ping is failed with 1011.
    Anything read proves it alive, a pong or a message."""
    if connection.active or connection.reading_paused:
        connection.active = False
        connection.idle_since = now
        connection.ping_sent_at = 0.0
        return
    if connection.ping_sent_at:
        if now - connection.ping_sent_at >= timeout_seconds:
            connection.fail(1011, "keepalive ping timeout")
        return
    if now - connection.idle_since >= interval_seconds and connection.is_open:
        connection.keepalive_ping()
        connection.ping_sent_at = now


class Keepalive:
    """The connections to keep alive, and the task that does it (:meth:`run`)."""

    def __init__(self, interval_seconds: float, timeout_seconds: float) -> None:
        """``interval_seconds``: silence before a ping; ``timeout_seconds``: silence after it
        before the connection is failed. Both must be positive (see :func:`keepalive_from`)."""
        self.interval_seconds = interval_seconds
        self.timeout_seconds = timeout_seconds
        self.visit_seconds = max(
            MIN_VISIT_SECONDS, min(interval_seconds, timeout_seconds) / VISITS_PER_INTERVAL
        )
        self._connections: set[Watched] = set()

    def __len__(self) -> int:
        return len(self._connections)

    def add(self, connection: Watched) -> None:
        """Keep ``connection`` alive from now on (it is open)."""
        self._connections.add(connection)

    def discard(self, connection: Watched) -> None:
        """``connection`` is closed: forget it (idempotent)."""
        self._connections.discard(connection)

    async def run(self) -> None:
        """Visit every connection every :attr:`visit_seconds`, until cancelled."""
        loop = asyncio.get_running_loop()
        interval, timeout = self.interval_seconds, self.timeout_seconds
        while True:
            await asyncio.sleep(self.visit_seconds)
            now = loop.time()
            for connection in list(self._connections):
                visit(connection, now, interval, timeout)


def keepalive_from(interval_seconds: float, timeout_seconds: float) -> Keepalive | None:
    """The keepalive the settings ask for, or None when either value is 0 or less (off)."""
    if interval_seconds <= 0 or timeout_seconds <= 0:
        return None
    return Keepalive(interval_seconds, timeout_seconds)
