"""Running the simulator from synchronous code: its own event loop in a daemon thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from local.upstream_sim.server import UpstreamSimulator


@contextlib.contextmanager
def run_in_thread(
    host: str = "127.0.0.1", port: int = 0, **kwargs: Any
) -> Iterator[UpstreamSimulator]:
    """Run a simulator on its own event loop in a daemon thread for synchronous code.

    Yields the started simulator (``.port``, ``.url_for()``, ``.set_fault()``, ``.stats()``);
    stops it on exit. Raises whatever :meth:`UpstreamSimulator.start` raised (port in use).
    """
    sim = UpstreamSimulator(host, port, **kwargs)
    ready = threading.Event()
    failure: list[BaseException] = []
    loop_box: list[asyncio.AbstractEventLoop] = []
    stopping: list[asyncio.Event] = []

    async def serve_until_stopped() -> None:
        stop = asyncio.Event()
        try:
            await sim.start()
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        loop_box.append(asyncio.get_running_loop())
        stopping.append(stop)
        ready.set()
        try:
            await stop.wait()
        finally:
            await sim.stop()

    thread = threading.Thread(
        target=asyncio.run, args=(serve_until_stopped(),), name="upstream-sim", daemon=True
    )
    thread.start()
    ready.wait()
    if failure:
        thread.join()
        raise failure[0]
    try:
        yield sim
    finally:
        loop_box[0].call_soon_threadsafe(stopping[0].set)
        thread.join(timeout=10)
