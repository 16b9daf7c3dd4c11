"""SIGTERM and SIGINT: the handlers only set events; the shutdown itself runs in the event loop
(:meth:`worker.app.Worker.run`), in order and under its budget."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from worker.logs import logger


def install_signal_handlers(
    loop: asyncio.AbstractEventLoop, on_first: Callable[[], None], on_second: Callable[[], None]
) -> None:
    """SIGTERM/SIGINT call ``on_first`` the first time and ``on_second`` after; nothing else
    happens in the handler (it only sets events)."""
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        logger.info("signal received", signal=signal.Signals(signum).name, count=received)
        if received == 1:
            on_first()
        else:
            on_second()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)
