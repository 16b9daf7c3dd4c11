"""Running blocking calls without blocking the event loop — or the process's exit.

Short boto3 calls go through ``asyncio.to_thread`` on the loop's default executor (sized at
start-up by :func:`install_executor`). A long poll is different: its thread may still be waiting
when the worker wants to exit, and executor threads are joined at interpreter exit. Such calls
run in a daemon thread of their own (:func:`run_in_daemon_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_THREADS: Final = 32


def install_executor(
    loop: asyncio.AbstractEventLoop, threads: int = DEFAULT_THREADS
) -> ThreadPoolExecutor:
    """Give ``loop`` a default executor of ``threads`` threads (for ``asyncio.to_thread``)."""
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="boto")
    loop.set_default_executor(executor)
    return executor


async def run_in_daemon_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn`` in a new daemon thread and await its result.

    Cancelling the await does not stop ``fn``; its result is then dropped. Exceptions of ``fn``
    are raised here.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            setter(value)

    def target() -> None:
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(deliver, future.set_exception, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(deliver, future.set_result, result)

    threading.Thread(target=target, name=getattr(fn, "__name__", "call"), daemon=True).start()
    return await future
