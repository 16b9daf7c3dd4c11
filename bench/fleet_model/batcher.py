"""A worker's parallel calls of one kind, sent together each round trip."""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from typing import Any

from bench.fleet_model.events import Answer, Request
from bench.fleet_model.world import World


class Batcher:
    """A worker's parallel calls of one kind: at most ``width`` in flight, sent together each
    round trip (the worker's semaphore of that width, its calls about equally long)."""

    def __init__(self, world: World[Any], width: int) -> None:
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
