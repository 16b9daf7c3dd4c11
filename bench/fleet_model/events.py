"""The simulation's clock and requests: events in time order, requests answered a round trip
later."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.fleet_model.store import Touch


class Answer(Enum):
    """How a request ended for its caller."""

    OK = "ok"
    CONFLICT = "conflict"
    """A conditional write whose condition did not hold (it cost its table units)."""
    THROTTLED = "throttled"
    """Every attempt was throttled: the caller sees an error (StoreError)."""


@dataclass(slots=True)
class Request:
    """One request: at admission ``check(arg)`` (None: no condition) decides between
    ``touches`` and ``apply(arg)``, and ``conflict`` (a failed condition's table units)."""

    touches: list[Touch]
    conflict: list[Touch]
    check: Callable[[Any], bool] | None = None
    apply: Callable[[Any], None] | None = None
    arg: Any = None


class Sim:
    """A discrete-event clock: callbacks at times, run in time order (ties in order of
    scheduling)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at time ``when`` (not before now)."""
        heapq.heappush(self._queue, (max(when, self.now), next(self._seq), fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` ``delay`` seconds from now."""
        self.at(self.now + delay, fn, *args)

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        """Run events up to time ``until``, or until ``stop()`` is true after an event."""
        queue = self._queue
        while queue and queue[0][0] <= until:
            when, _, fn, args = heapq.heappop(queue)
            self.now = when
            fn(*args)
            if stop is not None and stop():
                return
        self.now = max(self.now, until)
