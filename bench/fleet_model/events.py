"""The simulation's clock and requests: events in time order, requests answered a round trip
later, a worker's parallel calls sent together."""

from __future__ import annotations

import functools
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.fleet_model.store import Touch
    from bench.fleet_model.world import World


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


class Batcher:
    """A worker's parallel calls of one kind: at most ``width`` in flight, sent together each
    round trip (the worker's semaphore of that width, its calls about equally long)."""

    def __init__(self, world: World, width: int) -> None:
        self.world = world
        self.width = width
        self._pending: deque[
            tuple[Callable[[Any], Request | None], Callable[[Any, Answer | None], None], Any]
        ]
        self._pending = deque()
        self._busy = False

    def submit(
        self,
        build: Callable[[Any], Request | None],
        done: Callable[[Any, Answer | None], None],
        item: Any,
    ) -> None:
        """``build(item)`` makes the request when its turn comes (None: nothing to send, and
        ``done(item, None)``); ``done(item, answer)`` gets its answer."""
        self._pending.append((build, done, item))
        if not self._busy:
            self._busy = True
            self.world.sim.after(0.0, self._next)

    def _next(self) -> None:
        pending = self._pending
        while pending:
            requests, dones = [], []
            while pending and len(requests) < self.width:
                build, done, item = pending.popleft()
                request = build(item)
                if request is None:
                    done(item, None)
                else:
                    requests.append(request)
                    dones.append((done, item))
            if requests:
                self.world.send(requests, functools.partial(self._answered, dones))
                return
        self._busy = False

    def _answered(self, dones: list[tuple[Any, Any]], answers: list[Answer]) -> None:
        for (done, item), answer in zip(dones, answers, strict=True):
            done(item, answer)
        self._next()


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
