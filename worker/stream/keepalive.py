"""Keepalive for every upstream connection of a worker, from one task.

A timer per connection (websockets' own keepalive task) costs every held stream a wake-up per
ping interval whether or not it is silent. Here one task visits every open connection a few
times per interval (:meth:`~worker.stream.websocket.WebSocketTransport.check_alive`): a
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
    """A connection as the keepalive sees it."""

    def check_alive(self, now: float, interval_seconds: float, timeout_seconds: float) -> None:
        """Ping it if it was silent too long, fail it if its ping went unanswered."""
        ...


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
                connection.check_alive(now, interval, timeout)


def keepalive_from(interval_seconds: float, timeout_seconds: float) -> Keepalive | None:
    """The keepalive the settings ask for, or None when either value is 0 or less (off)."""
    if interval_seconds <= 0 or timeout_seconds <= 0:
        return None
    return Keepalive(interval_seconds, timeout_seconds)
