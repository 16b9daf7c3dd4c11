"""Sessions as the store holds them, and the fleet index's order (start time: the watch ring).

A :class:`Session` is one worker item: its state, its ``hb`` and the streams attached to it. The
:class:`Fleet` keeps every session item that exists (live ones and tombstones not yet deleted)
in the fleet index's sort order, which the ring watch reads from. A session knows its worker as
a :class:`Holder` (the model's :class:`~bench.fleet_model.agents.Agent` is the one).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

from streamlease.model import WorkerInfo
from streamlease.schema import LIVE_WORKER_STATES, WorkerState


class Holder(Protocol):
    """A session's worker as the rest of the fleet sees it: the world's registry and handoff
    queue, the watches that judge its session and the takeovers that sweep it."""

    idx: int
    capacity: int
    observer: bool
    alive: bool
    session: Session | None

    def receive(self) -> None:
        """A long poll answered: handle the commands it brought."""
        ...


@dataclass(eq=False)
class Session:
    """One worker item (a session)."""

    no: int
    sid: str
    agent: Holder
    started_at: float
    state: WorkerState = WorkerState.RUNNING
    hb: int = 0
    renewed_at: float = 0.0
    """When ``hb`` last moved."""
    active: int = 0
    """``active_streams`` as its last renewal wrote it (a dead session's stays)."""
    load: float | None = None
    """The load its last renewal published (None: the fleet has no load figures)."""
    expired_at: float = 0.0
    held: set[int] = field(default_factory=set)
    """Streams whose ``lease_owner`` is this session."""

    @property
    def live(self) -> bool:
        """RUNNING or DRAINING."""
        return self.state in LIVE_WORKER_STATES

    def info(self, capacity: int) -> WorkerInfo:
        """The item as the fleet index shows it (what
        :func:`worker.ownership.fleet_view.count_fleet` reads)."""
        return WorkerInfo(
            worker_id=self.sid,
            state=self.state,
            heartbeat_at_ms=0,
            expires_at_ms=0,
            active_streams=self.active,
            capacity=capacity,
            host="",
            pid=0,
            hb=self.hb,
            load_milli=None if self.load is None else round(self.load * 1000),
        )


class Fleet:
    """Every session item, by session number and in fleet-index order."""

    def __init__(self) -> None:
        self.by_no: list[Session] = []
        self._starts: list[float] = []
        self._order: list[Session] = []

    def create(self, agent: Holder, now: float) -> Session:
        """A new session item for ``agent``, started at ``now``."""
        no = len(self.by_no)
        session = Session(no, f"w{agent.idx}.{no}", agent, now + no * 1e-9)
        self.by_no.append(session)
        at = bisect.bisect(self._starts, session.started_at)
        self._starts.insert(at, session.started_at)
        self._order.insert(at, session)
        return session

    def delete(self, session: Session) -> None:
        """The item is gone (a swept tombstone)."""
        at = bisect.bisect_left(self._starts, session.started_at)
        if at < len(self._order) and self._order[at] is session:
            del self._starts[at]
            del self._order[at]

    def __len__(self) -> int:
        return len(self._order)

    def in_order(self) -> list[Session]:
        """Every session item, oldest first (a full read of the fleet index)."""
        return self._order

    def after(self, session: Session, count: int, skip: int = 0) -> list[Session]:
        """``count`` items following ``session`` in index order (wrapping around, never
        ``session`` itself), after skipping ``skip``."""
        n = len(self._order)
        if n <= 1:
            return []
        at = bisect.bisect_right(self._starts, session.started_at)
        out = []
        for i in range(skip, min(skip + count, n - 1)):
            out.append(self._order[(at + i) % n])
        return [s for s in out if s is not session]
