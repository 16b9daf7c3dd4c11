"""Connection states and progress of a worker's streams, written into their stream items.

Every holder tells the report of its connection's changes (:meth:`ConnectionReport.note`:
connected, retrying, rejected, with the failure as ``last_error``) and lets it watch its
progress (:meth:`ConnectionReport.track`, a :class:`~worker.stream.progress.ProgressWatch`).
One task per worker (:meth:`ConnectionReport.run`) looks at every held stream about once a
second and writes, conditionally on still holding it:

- the state an operator should see — the connection's own, or the trouble its progress shows
  (stalled, malformed, sink failing) — when it changed: soon, the same state and error again
  at most every :data:`REPEAT_SECONDS`, any one stream at most once every
  :data:`MIN_GAP_SECONDS` (a flapping upstream coalesces into its latest state), never per
  message. Each such write carries the progress counters;
- otherwise the progress counters alone, at most every ``progress_seconds`` per stream (the
  first at a random point of that interval, so a worker's streams spread their writes) and
  only when they changed; and once, within a scan, after the holding's first acknowledged
  batch, unless a state write already carried a seq: each progress write records the seq
  acknowledged when it was taken, and that reading, with the live checkpoint of a later
  renewal, is what a delivery rate is computed from (``streamlease.live_progress``) — without
  it a new stream would show no rate for up to ``progress_seconds``;
- at most :data:`PARALLEL_WRITES` at once — an outage that makes every upstream retry at the
  same moment becomes a short queue of writes, not a burst. A write that got no answer is tried
  again after :data:`RETRY_SECONDS`.

The acquire wrote ``connecting`` (and cleared the last holding's progress); the release clears
the state and writes the final progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from streamlease.errors import LeaseLost, StoreError
from streamlease.lease_store import LeaseStore
from streamlease.model import Lease, StreamProgress
from streamlease.schema import ConnectionState
from worker.logs import describe, logger
from worker.stream.progress import ProgressWatch, State

REPEAT_SECONDS: Final = 60.0
"""The same state with the same ``last_error`` text is written again at most this often."""
MIN_GAP_SECONDS: Final = 1.0
"""At most one connection-state write per stream per this many seconds."""
SCAN_SECONDS: Final = 1.0
"""How often every held stream's progress is looked at (stalled, malformed, sink failing)."""
RETRY_SECONDS: Final = 5.0
"""An unanswered write is tried again this long after."""
PARALLEL_WRITES: Final = 8
PROGRESS_SECONDS: Final = 300.0


@dataclass(eq=False, slots=True)
class _Entry:
    lease: Lease
    on_lost: Callable[[], None]
    progress: ProgressWatch | None = None
    link: State = (ConnectionState.CONNECTING, None)
    """The connection's own state, as last noted."""
    noted: bool = False
    """A note came since the last write (a repeat of the written state may be due)."""
    written: State = (ConnectionState.CONNECTING, None)
    tried_at: float = -math.inf
    unanswered: State | None = None
    """The state whose write got no answer (tried again after :data:`RETRY_SECONDS`)."""
    progress_written: StreamProgress | None = None
    progress_due: float = math.inf
    seq_reported: bool = False
    """A write carrying an acknowledged seq was made (or tried) for this holding."""


class ConnectionReport:
    """The worker's connection-state writer (see the module docstring)."""

    def __init__(
        self,
        *,
        min_gap_seconds: float = MIN_GAP_SECONDS,
        repeat_seconds: float = REPEAT_SECONDS,
        parallel_writes: int = PARALLEL_WRITES,
        progress_seconds: float = PROGRESS_SECONDS,
        scan_seconds: float = SCAN_SECONDS,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``rand`` (uniform in [0, 1)) and ``clock`` (monotonic seconds: every due time, gap
        and idle threshold is judged on it) are injectable for tests."""
        self._min_gap = min_gap_seconds
        self._repeat = repeat_seconds
        self._parallel = parallel_writes
        self._progress_seconds = progress_seconds
        self._scan_seconds = scan_seconds
        self._rand = rand
        self._clock = clock
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._dirty: set[tuple[str, int]] = set()
        self._changed = asyncio.Event()
        self._next_scan = 0.0

    def track(self, lease: Lease, progress: ProgressWatch, on_lost: Callable[[], None]) -> None:
        """Watch ``progress`` of ``lease``'s stream from now on (its holder started)."""
        entry = self._entry(lease, on_lost)
        entry.progress = progress
        entry.progress_due = self._clock() + self._rand() * self._progress_seconds

    def note(
        self,
        lease: Lease,
        state: ConnectionState,
        error: str | None,
        on_lost: Callable[[], None],
    ) -> None:
        """The connection of ``lease``'s stream is now ``state`` (failing with ``error``);
        ``on_lost()`` is called if a write shows the lease is no longer ours."""
        entry = self._entry(lease, on_lost)
        entry.link = (state, error)
        entry.noted = True
        self._dirty.add((lease.stream_id, lease.epoch))
        self._changed.set()

    def forget(self, stream_id: str, epoch: int) -> None:
        """The holding ended: nothing more is written for it."""
        key = (stream_id, epoch)
        self._entries.pop(key, None)
        self._dirty.discard(key)

    @property
    def pending(self) -> int:
        """Streams with a noted state not written yet."""
        return len(self._dirty)

    async def run(self, store: LeaseStore) -> None:
        """Write what is due into ``store`` until cancelled."""
        next_at = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_at - self._clock())):
                    await self._changed.wait()
            self._changed.clear()
            next_at = await self._write_due(store)

    def _entry(self, lease: Lease, on_lost: Callable[[], None]) -> _Entry:
        key = (lease.stream_id, lease.epoch)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(lease, on_lost)
        return entry

    async def _write_due(self, store: LeaseStore) -> float:
        """Write everything due; returns when to look again (monotonic)."""
        now = self._clock()
        if now >= self._next_scan:
            self._next_scan = now + self._scan_seconds
            keys = list(self._entries)
            self._dirty.clear()
        else:
            keys = list(self._dirty)
        next_at = self._next_scan
        writes: list[Coroutine[Any, Any, None]] = []
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                self._dirty.discard(key)
                continue
            shown = entry.link if entry.progress is None else entry.progress.judge(now, entry.link)
            if self._state_due(entry, shown, now):
                gap = RETRY_SECONDS if shown == entry.unanswered else self._min_gap
                ready_at = entry.tried_at + gap
                if ready_at <= now:
                    self._dirty.discard(key)
                    writes.append(self._write_state(store, entry, shown))
                else:
                    self._dirty.add(key)
                    next_at = min(next_at, ready_at)
                continue
            self._dirty.discard(key)
            progress = entry.progress
            if progress is None:
                continue
            if now >= entry.progress_due:
                snapshot = progress.snapshot()
                if _changed(snapshot, entry.progress_written):
                    writes.append(self._write_progress(store, entry, snapshot))
            elif not entry.seq_reported and progress.acked_seq is not None:
                writes.append(self._write_progress(store, entry, progress.snapshot(), first=True))
        if writes:
            limit = asyncio.Semaphore(self._parallel)

            async def limited(write: Coroutine[Any, Any, None]) -> None:
                async with limit:
                    await write

            await asyncio.gather(*(limited(w) for w in writes))
        return next_at

    def _state_due(self, entry: _Entry, shown: State, now: float) -> bool:
        noted, entry.noted = entry.noted, False
        if shown != entry.written or entry.unanswered is not None:
            return True
        return noted and now - entry.tried_at >= self._repeat

    async def _write_state(self, store: LeaseStore, entry: _Entry, shown: State) -> None:
        lease = entry.lease
        state, error = shown
        progress = None if entry.progress is None else entry.progress.snapshot()
        entry.tried_at = self._clock()
        try:
            if progress is None:
                await asyncio.to_thread(
                    store.record_connection, lease.stream_id, lease.owner, lease.epoch, state, error
                )
            else:
                await asyncio.to_thread(
                    store.record_connection,
                    lease.stream_id,
                    lease.owner,
                    lease.epoch,
                    state,
                    error,
                    progress=progress,
                )
        except (LeaseLost, StoreError) as exc:
            self._failed(entry, exc, shown)
            return
        entry.written, entry.unanswered = shown, None
        if progress is not None:
            entry.seq_reported = entry.seq_reported or progress.seq is not None
            entry.progress_written = progress  # its own schedule keeps its phase

    async def _write_progress(
        self, store: LeaseStore, entry: _Entry, progress: StreamProgress, *, first: bool = False
    ) -> None:
        """Write ``progress``; ``first``: the holding's first acknowledged seq, off the
        schedule (which keeps its phase)."""
        lease = entry.lease
        entry.seq_reported = entry.seq_reported or progress.seq is not None
        if not first:
            entry.progress_due = self._clock() + self._progress_seconds
        try:
            await asyncio.to_thread(
                store.record_progress, lease.stream_id, lease.owner, lease.epoch, progress
            )
        except (LeaseLost, StoreError) as exc:
            self._failed(entry, exc, None)
            return
        entry.progress_written = progress

    def _failed(self, entry: _Entry, exc: LeaseLost | StoreError, state: State | None) -> None:
        lease = entry.lease
        if isinstance(exc, LeaseLost):
            self.forget(lease.stream_id, lease.epoch)
            entry.on_lost()
            return
        if state is not None:
            entry.unanswered = state
        logger.info("connection state not written", stream_id=lease.stream_id, error=describe(exc))


def _changed(progress: StreamProgress, written: StreamProgress | None) -> bool:
    """Whether ``progress`` counts anything ``written`` did not (when each was taken aside)."""
    return written is None or dataclasses.replace(written, at_ms=progress.at_ms) != progress
