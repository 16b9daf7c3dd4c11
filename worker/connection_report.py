"""Connection states of a worker's streams, written into their stream items.

Every :class:`~worker.upstream_feed.UpstreamFeed` notes its stream's state changes (connected,
retrying, rejected, with the failure as ``last_error``) here; one task per worker
(:meth:`ConnectionReport.run`) writes them: a change soon, the same state and error again at
most every :data:`REPEAT_SECONDS`, any one stream at most once every :data:`MIN_GAP_SECONDS` (a
flapping upstream coalesces into its latest state), never per message, and at most
:data:`PARALLEL_WRITES` at once — an outage that makes every upstream retry at the same moment
becomes a short queue of writes, not a burst. The acquire wrote ``connecting``; the release
clears the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from streamlease.errors import LeaseLost, StoreError
from streamlease.lease_store import LeaseStore
from streamlease.model import Lease
from streamlease.schema import ConnectionState
from worker.logs import describe, logger

REPEAT_SECONDS: Final = 60.0
"""The same state with the same ``last_error`` text is written again at most this often."""
MIN_GAP_SECONDS: Final = 1.0
"""At most one connection-state write per stream per this many seconds."""
PARALLEL_WRITES: Final = 8

_State = tuple[ConnectionState, str | None]


@dataclass(eq=False, slots=True)
class _Entry:
    lease: Lease
    on_lost: Callable[[], None]
    pending: _State | None = None
    written: _State = (ConnectionState.CONNECTING, None)
    tried_at: float = -math.inf


class ConnectionReport:
    """The worker's connection-state writer (see the module docstring)."""

    def __init__(
        self,
        *,
        min_gap_seconds: float = MIN_GAP_SECONDS,
        repeat_seconds: float = REPEAT_SECONDS,
        parallel_writes: int = PARALLEL_WRITES,
    ) -> None:
        self._min_gap = min_gap_seconds
        self._repeat = repeat_seconds
        self._parallel = parallel_writes
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._dirty: set[tuple[str, int]] = set()
        self._changed = asyncio.Event()

    def note(
        self,
        lease: Lease,
        state: ConnectionState,
        error: str | None,
        on_lost: Callable[[], None],
    ) -> None:
        """The connection of ``lease``'s stream is now ``state`` (failing with ``error``);
        ``on_lost()`` is called if the write shows the lease is no longer ours."""
        key = (lease.stream_id, lease.epoch)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(lease, on_lost)
        entry.pending = (state, error)
        self._dirty.add(key)
        self._changed.set()

    def forget(self, stream_id: str, epoch: int) -> None:
        """The holding ended: nothing more is written for it."""
        key = (stream_id, epoch)
        self._entries.pop(key, None)
        self._dirty.discard(key)

    @property
    def pending(self) -> int:
        """Streams with a state not written yet."""
        return len(self._dirty)

    async def run(self, store: LeaseStore) -> None:
        """Write noted changes into ``store`` until cancelled."""
        next_at = math.inf
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    None if math.isinf(next_at) else max(0.0, next_at - time.monotonic())
                ):
                    await self._changed.wait()
            self._changed.clear()
            next_at = await self._write_due(store)

    async def _write_due(self, store: LeaseStore) -> float:
        """Write every change that is due; returns when the next one will be (inf: none)."""
        now = time.monotonic()
        due: list[_Entry] = []
        next_at = math.inf
        for key in list(self._dirty):
            entry = self._entries.get(key)
            state = entry.pending if entry is not None else None
            if (
                entry is None
                or state is None
                or (state == entry.written and now - entry.tried_at < self._repeat)
            ):
                self._dirty.discard(key)
                continue
            ready_at = entry.tried_at + self._min_gap
            if ready_at <= now:
                self._dirty.discard(key)
                due.append(entry)
            else:
                next_at = min(next_at, ready_at)
        if due:
            limit = asyncio.Semaphore(self._parallel)
            await asyncio.gather(*(self._write(store, entry, limit) for entry in due))
        return next_at

    async def _write(self, store: LeaseStore, entry: _Entry, limit: asyncio.Semaphore) -> None:
        state = entry.pending
        if state is None:
            return
        entry.pending = None
        entry.tried_at = time.monotonic()
        lease = entry.lease
        async with limit:
            try:
                await asyncio.to_thread(
                    store.record_connection,
                    lease.stream_id,
                    lease.owner,
                    lease.epoch,
                    state[0],
                    state[1],
                )
            except LeaseLost:
                self.forget(lease.stream_id, lease.epoch)
                entry.on_lost()
                return
            except StoreError as exc:  # the next change tries again
                logger.info(
                    "connection state not written", stream_id=lease.stream_id, error=describe(exc)
                )
                return
        entry.written = state
