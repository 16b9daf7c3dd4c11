"""The streams this worker holds (or is acquiring), and the task group their holders run in.

Capacity is counted here: a stream occupies a place from the moment an acquire is attempted
(a *reservation*) until its holder has finished releasing it, so concurrent acquires from the
command poller, the reconciler and suspect takeovers can never overshoot ``capacity``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from worker.ownership.end_reason import EndReason
from worker.ownership.holder import StreamHolder
from worker.ownership.load_meter import LoadMeter
from worker.stream.delivery import Delivery


class Holdings:
    """Held streams by id, reservations, and streams recently given away."""

    def __init__(self, capacity: int, given_away_seconds: float) -> None:
        """``capacity``: most streams held plus reserved at once; ``given_away_seconds``: how
        long a stream this worker handed off is left to the others."""
        self.capacity = capacity
        self.given_away_seconds = given_away_seconds
        self._holders: dict[str, StreamHolder] = {}
        self._reserved: set[str] = set()
        self._given_away: dict[str, float] = {}
        self._changed = asyncio.Event()
        self._tasks: asyncio.TaskGroup | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self.load = LoadMeter(lambda: self._holders.values())
        """What the held streams cost (sampled once per heartbeat for the session renewal)."""

    def bind(self, tasks: asyncio.TaskGroup) -> None:
        """The task group holders run in (set once the worker's task groups exist)."""
        self._tasks = tasks

    # --- counting ----------------------------------------------------------------------------

    def __contains__(self, stream_id: object) -> bool:
        return stream_id in self._holders or stream_id in self._reserved

    def __iter__(self) -> Iterator[StreamHolder]:
        return iter(list(self._holders.values()))

    def deliveries(self) -> Iterator[Delivery]:
        """The delivery of every holder (what the delivery gate pauses and resumes)."""
        return iter([holder.delivery for holder in self._holders.values()])

    def holder(self, stream_id: str) -> StreamHolder | None:
        """The holder of ``stream_id`` (None: not held, or only being acquired)."""
        return self._holders.get(stream_id)

    @property
    def count(self) -> int:
        """Streams held or being acquired: what capacity is measured against."""
        return len(self._holders) + len(self._reserved)

    @property
    def active_count(self) -> int:
        """Streams held and not ending (the ActiveConnections gauge, the worker item's count)."""
        return sum(1 for holder in self._holders.values() if holder.is_active)

    @property
    def free(self) -> int:
        """How many more streams may be reserved."""
        return max(0, self.capacity - self.count)

    # --- changes -----------------------------------------------------------------------------

    def reserve(self, stream_id: str) -> bool:
        """Take a place for an acquire of ``stream_id``; False when held or at capacity."""
        if stream_id in self or self.count >= self.capacity:
            return False
        self._reserved.add(stream_id)
        return True

    def cancel_reservation(self, stream_id: str) -> None:
        """The acquire was lost: free the place."""
        self._reserved.discard(stream_id)
        self._notify()

    def start(self, holder: StreamHolder) -> None:
        """Turn the reservation into a running holder, one task in the bound task group."""
        if self._tasks is None:
            raise RuntimeError("holdings are not bound to a task group")
        self._reserved.discard(holder.stream_id)
        self._holders[holder.stream_id] = holder
        task = self._tasks.create_task(self._hold(holder), name=f"hold stream {holder.stream_id}")
        self._running[holder.stream_id] = task

    async def _hold(self, holder: StreamHolder) -> None:
        try:
            await holder.run()
        finally:
            if self._holders.get(holder.stream_id) is holder:
                del self._holders[holder.stream_id]
                self._running.pop(holder.stream_id, None)
            self._notify()

    def cancel_all(self) -> int:
        """Cancel every holder task (shutdown past its budget); returns how many were running."""
        tasks = [task for task in self._running.values() if not task.done()]
        for task in tasks:
            task.cancel()
        return len(tasks)

    def end_all(self, reason: EndReason) -> int:
        """Ask every holder to end for ``reason``; returns how many were asked."""
        holders = list(self._holders.values())
        for holder in holders:
            self.note_given_away(holder.stream_id)
            holder.request_end(reason)
        return len(holders)

    def note_given_away(self, stream_id: str, now_mono: float | None = None) -> None:
        """Remember that this worker handed ``stream_id`` off (so it does not take it back)."""
        now = time.monotonic() if now_mono is None else now_mono
        if len(self._given_away) > 2 * self.capacity:  # forget what is past the window
            cutoff = now - self.given_away_seconds
            self._given_away = {s: at for s, at in self._given_away.items() if at > cutoff}
        self._given_away[stream_id] = now

    def given_away_recently(self, stream_id: str, now_mono: float | None = None) -> bool:
        """True when this worker handed ``stream_id`` off less than ``given_away_seconds`` ago."""
        at = self._given_away.get(stream_id)
        if at is None:
            return False
        now = time.monotonic() if now_mono is None else now_mono
        if now - at >= self.given_away_seconds:
            del self._given_away[stream_id]
            return False
        return True

    async def wait_changed(self, timeout_seconds: float | None = None) -> None:
        """Return after the next change (a stream released, a reservation freed) or a timeout."""
        changed = self._changed
        try:
            async with asyncio.timeout(timeout_seconds):
                await changed.wait()
        except TimeoutError:
            return

    async def wait_empty(self) -> None:
        """Return once no stream is held or reserved."""
        while self.count:
            await self.wait_changed()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
