"""When each held lease is renewed next: one monotonic timetable, spread evenly over a heartbeat.

Pure bookkeeping (no clock reads, no I/O): :mod:`worker.ownership.renewal` asks it what is due and
tells it what happened. Every lease owns a *slot* — a phase in the heartbeat cycle — that repeats
every heartbeat. A new lease gets the middle of the widest free gap between existing slots, so
leases acquired in a burst (start-up, a takeover of a dead worker's streams) do not renew in a burst
forever after. A failed attempt is retried on its own timer without giving up the slot, so the
spread survives a DynamoDB outage.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _Entry:
    slot: float
    """The planned renewal time (monotonic seconds); advances by one interval per success."""
    due: float
    """The next attempt: the slot, or an earlier retry after a failure."""
    version: int
    in_flight: bool = False


class RenewalSchedule(Generic[K]):
    """Per-lease renewal due times on the monotonic clock, ``interval_seconds`` apart."""

    def __init__(self, interval_seconds: float) -> None:
        """``interval_seconds``: the heartbeat; every lease is renewed once per interval."""
        if interval_seconds <= 0:
            raise ValueError("interval_seconds must be positive")
        self._interval = interval_seconds
        self._entries: dict[K, _Entry] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._versions = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @property
    def interval_seconds(self) -> float:
        """The heartbeat interval."""
        return self._interval

    def add(self, key: K, now: float) -> float:
        """Schedule a new lease; returns its first due time, in ``(now, now + interval]``.

        The first renewal lands in the middle of the widest gap between the slots already
        scheduled, seen as phases on a circle of one interval. Renewing sooner than a full
        heartbeat after the acquire is always safe; renewing in bursts is what this avoids.
        """
        if key in self._entries:
            return self._entries[key].due
        offset = self._widest_gap_middle(now)
        slot = now + offset
        self._entries[key] = _Entry(slot=slot, due=slot, version=next(self._versions))
        self._push(key)
        return slot

    def remove(self, key: K) -> None:
        """Forget a lease (released, lost, fenced). Unknown keys are ignored."""
        self._entries.pop(key, None)

    def next_due(self) -> float | None:
        """The earliest due time of a lease not in flight, or None when nothing is waiting."""
        self._drop_stale_heads()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[K, float]]:
        """Leases due at ``now``, earliest first, with the time each was due.

        They are *in flight* until :meth:`succeeded` or :meth:`retry` is called for them.
        """
        out: list[tuple[K, float]] = []
        while True:
            self._drop_stale_heads()
            if not self._heap or self._heap[0][0] > now:
                return out
            due, _, key = heapq.heappop(self._heap)
            self._entries[key].in_flight = True
            out.append((key, due))

    def succeeded(self, key: K, now: float) -> float | None:
        """A renewal landed; the lease is due again at its next slot after ``now``.

        Returns that due time, or None when the lease was removed meanwhile.
        """
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.slot <= now:
            # Skip the slots that passed while late or failing; the phase is kept.
            missed = int((now - entry.slot) // self._interval) + 1
            entry.slot += missed * self._interval
        entry.due = entry.slot
        self._reschedule(key, entry)
        return entry.due

    def retry(self, key: K, at: float) -> None:
        """A renewal got no answer; try again at ``at`` (the slot itself is kept)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.due = at
        self._reschedule(key, entry)

    def oldest_slot(self) -> float | None:
        """The earliest planned renewal not yet done (a slot only advances on success), or
        None when nothing is scheduled. ``now - oldest_slot()`` is how far renewals are behind.
        """
        return min((entry.slot for entry in self._entries.values()), default=None)

    def slot_of(self, key: K) -> float | None:
        """The planned renewal time of ``key`` (for tests and diagnostics)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.slot

    # --- internals ---------------------------------------------------------------------------

    def _widest_gap_middle(self, now: float) -> float:
        """Offset in ``(0, interval]`` from ``now`` at the middle of the widest gap in phase."""
        interval = self._interval
        if not self._entries:
            return interval
        phases = sorted((entry.slot - now) % interval for entry in self._entries.values())
        best_start, best_width = phases[-1], phases[0] + interval - phases[-1]
        for before, after in itertools.pairwise(phases):
            if after - before > best_width:
                best_start, best_width = before, after - before
        offset = (best_start + best_width / 2) % interval
        return offset if offset > 0 else interval

    def _reschedule(self, key: K, entry: _Entry) -> None:
        entry.in_flight = False
        entry.version = next(self._versions)
        self._push(key)

    def _push(self, key: K) -> None:
        entry = self._entries[key]
        heapq.heappush(self._heap, (entry.due, entry.version, key))

    def _drop_stale_heads(self) -> None:
        """Lazy deletion: discard heap heads of removed or rescheduled leases."""
        heap = self._heap
        while heap:
            _, version, key = heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.version == version and not entry.in_flight:
                return
            heapq.heappop(heap)
