"""What a connection does before and around its data: the open messages, their answers, and
application pings.

A :class:`Connection` is the :class:`~worker.stream.transport.UpstreamHandler` of one
connection. Its ``messages_received`` *is* the owner's batch callback once the connection is
open for data; while an open message waits for its answer it is :meth:`Connection._hold`, which
keeps what arrives aside for :func:`open_connection` to read. The open messages
(:class:`~streamlease.templates.OpenMessage`) are sent in order, each rendered with the
connection's secrets and resume point; a message with ``expect`` is answered before the next
one goes — what arrives before the answer is the feed's greeting, not data, and is dropped;
what arrives after it in the same read is data. A refusing answer, a close during
the wait or no answer within the message's timeout is an :class:`OpenRefused`: the link treats
it as a rejection of the stream.

:class:`AppPinger` sends a profile's ping message every ``interval_seconds`` while the
connection is open (a timer on the loop, cancelled with the connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from websockets.frames import Frame

from streamlease.templates import AppPing, OpenMessage
from worker.stream.transport import Closed, UpstreamTransport

REFUSING_CLOSE_CODES: Final = frozenset({1008})
"""Close codes below 4000 that, during a login, mean the upstream said no (policy violation);
every application code (4000-4999) does too. Other closes during a login are retried."""


class OpenRefused(Exception):
    """The upstream refused an open message, or did not answer it in time. Its text is safe to
    store and log (it never holds the message or the answer)."""


class OpenInterrupted(Exception):
    """The connection ended during an open message's wait in a way worth a retry."""

    def __init__(self, closed: Closed) -> None:
        super().__init__(
            f"upstream closed the connection while logging in (close code {closed.code})"
        )
        self.closed = closed


class Connection:
    """The handler of one connection: its messages go to the owner (after the open messages'
    answers), its close to the link."""

    __slots__ = ("_arrived", "_deliver", "_held", "closed", "messages_received")

    def __init__(self, on_messages: Callable[[list[Frame]], None], *, holding: bool) -> None:
        """``holding``: keep what arrives aside from the start (the handshake's answer may
        bring the greeting in the same read) until :meth:`release`."""
        self._deliver = on_messages
        self.messages_received = self._hold if holding else on_messages
        self.closed: asyncio.Future[Closed] = asyncio.get_running_loop().create_future()
        self._held: list[Frame] = []
        # Only while holding (an Event is ~0.9 KiB, and every held stream has a connection).
        self._arrived: asyncio.Event | None = asyncio.Event() if holding else None

    def connection_closed(self, closed: Closed) -> None:
        if not self.closed.done():
            self.closed.set_result(closed)
        if self._arrived is not None:
            self._arrived.set()

    def release(self) -> None:
        """Hand what was kept aside to the owner, and every batch from now on."""
        held, self._held = self._held, []
        self.messages_received = self._deliver
        self._arrived = None
        if held:
            self._deliver(held)

    def _hold(self, batch: list[Frame]) -> None:
        self._held += batch
        if self._arrived is not None:
            self._arrived.set()

    @staticmethod
    def holds_for(messages: Sequence[OpenMessage]) -> bool:
        """Whether a connection with these open messages starts holding."""
        return any(message.expect is not None for message in messages)

    async def answer(self, message: OpenMessage, number: int) -> None:
        """Wait for the answer to ``message`` (the ``number``-th open message): frames up to
        the matching one are dropped, those behind it stay held. Raises
        :class:`OpenRefused` (refusing answer, refusing close, no answer in time) or
        :class:`OpenInterrupted`."""
        expect, refuse, arrived = message.expect, message.refuse, self._arrived
        assert expect is not None and arrived is not None  # holding: see holds_for
        try:
            async with asyncio.timeout(message.timeout_seconds):
                while True:
                    while self._held:
                        frame = self._held.pop(0)
                        if refuse is not None and refuse.matches_text(bytes(frame.data)):
                            raise OpenRefused(f"upstream refused open message {number}")
                        if expect.matches_text(bytes(frame.data)):
                            return
                    if self.closed.done():
                        closed = self.closed.result()
                        if closed.code in REFUSING_CLOSE_CODES or 4000 <= closed.code < 5000:
                            raise OpenRefused(
                                f"upstream closed the connection at open message {number}"
                                f" (close code {closed.code})"
                            )
                        raise OpenInterrupted(closed)
                    arrived.clear()
                    await arrived.wait()
        except TimeoutError:
            raise OpenRefused(
                f"no answer to open message {number} within {message.timeout_seconds} s"
            ) from None


async def open_connection(
    transport: UpstreamTransport,
    connection: Connection,
    messages: Sequence[OpenMessage],
    secrets: Mapping[str, str],
    last_seq: int,
) -> None:
    """Send ``messages`` in order on a new connection (made ``holding`` when one of them
    waits), each awaiting its answer when it asks to; then the connection delivers to the
    owner. Raises ``ConnectionError`` (closed before a message could be sent),
    :class:`OpenRefused`, :class:`OpenInterrupted`."""
    for number, message in enumerate(messages, start=1):
        transport.send_text(message.send.render(secrets, last_seq))
        if message.expect is not None:
            await connection.answer(message, number)
    connection.release()


class AppPinger:
    """Sends ``ping`` on ``transport`` every ``interval_seconds`` until :meth:`cancel` or the
    connection is gone."""

    __slots__ = ("_handle", "_loop", "_ping", "_text", "_transport", "sent")

    def __init__(self, transport: UpstreamTransport, ping: AppPing) -> None:
        self._transport = transport
        self._ping = ping
        self._text = ping.send.render({}, 0)
        self._loop = asyncio.get_running_loop()
        self.sent = 0
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(
            ping.interval_seconds, self._tick
        )

    def _tick(self) -> None:
        try:
            self._transport.send_text(self._text)
        except ConnectionError:
            self._handle = None
            return
        self.sent += 1
        self._handle = self._loop.call_later(self._ping.interval_seconds, self._tick)

    def cancel(self) -> None:
        """Send no more pings."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
