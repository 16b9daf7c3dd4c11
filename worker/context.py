"""What every part of a running worker shares: settings, identity, adapters, counters, events.

One :class:`WorkerContext` per process, built at start-up by :mod:`worker.app`. It holds no
behaviour of its own; it spares every constructor the same eight arguments.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from streamlease.lease_store import LeaseStore
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from streamlease.table_capacity import ON_DEMAND_WRITE_UNITS
from worker.fencing.fence import DeliveryGate
from worker.identity import Identity
from worker.lease_event_log import LeaseEventLog
from worker.metrics import WorkerMetrics
from worker.sinks import Sink
from worker.stream.connection_report import ConnectionReport
from worker.stream.keepalive import Keepalive
from worker.tracing import Tracing

if TYPE_CHECKING:
    from worker.fencing.session import Session
    from worker.secrets import Secrets


class HandoffSender(Protocol):
    """Sends a handoff command for a released stream (implemented by the command queue)."""

    async def send_handoff(
        self, stream_id: str, generation: int, *, rebalance: bool = False
    ) -> bool:
        """Send it (``rebalance``: meant for a worker below its fair share); True when SQS
        accepted it. Never raises for an SQS failure."""
        ...


@dataclass
class WorkerContext:
    """The shared parts of one worker process."""

    settings: Settings
    identity: Identity
    store: LeaseStore
    sessions: SessionStore
    sink: Sink
    metrics: WorkerMetrics
    events: LeaseEventLog
    handoffs: HandoffSender
    shutdown_requested: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the first SIGTERM/SIGINT: stop taking streams, hand every stream off, exit."""
    hurry: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a second signal: shorten the drain, release what can be released."""
    session: Session | None = None
    """The current session (None before the first is open; replaced after one expired)."""
    connections: ConnectionReport = field(default_factory=ConnectionReport)
    """Writes the streams' connection states and progress (run by the worker as a service
    task)."""
    gate: DeliveryGate = field(default_factory=DeliveryGate)
    """Pauses every stream of a fenced session and resumes them at its renewal (a service
    task in session mode)."""
    keepalive: Keepalive | None = None
    """Pings silent upstream connections (a service task; None: no keepalive)."""
    secrets: Secrets | None = None
    """Resolves the secrets of streams' handshake headers (None: no profile may use them)."""
    tracing: Tracing = field(default_factory=Tracing)
    """Spans of streams' starts (off unless the settings say where they go)."""
    loop_lag_seconds: float = 0.0
    """How late the event loop last woke up (measured every second)."""
    table_write_units: int = ON_DEMAND_WRITE_UNITS
    """Write units a second the lease table can take at once for a handoff's writes
    (:func:`streamlease.table_capacity.handoff_write_units`): read at start and every
    ``table_capacity_seconds`` (:mod:`worker.ownership.table_capacity`); a failed read keeps
    the last figure, and before the first a new on-demand table's."""

    @property
    def worker_id(self) -> str:
        """This worker's current id: its session's (a lost session is followed by a new id)."""
        session = self.session
        return self.identity.worker_id if session is None else session.worker_id

    @property
    def loop_lagging(self) -> bool:
        """True when the event loop woke a whole heartbeat late: take nothing new."""
        return self.loop_lag_seconds > self.settings.heartbeat_seconds
