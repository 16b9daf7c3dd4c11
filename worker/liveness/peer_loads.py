"""The peers' load figures, for a worker that counts the fleet's load (architecture §10).

The ``fleet`` index does not carry ``load_milli`` and ``cpu_permille`` (a deployed index's
projection cannot change), so a worker that reads the whole fleet (a small fleet's workers, a
large fleet's digest writer) reads them from the live peers' items: once a heartbeat, and as
soon as a live peer it has no figures for appears (then only the new ones). Loads move with a
30 s half-life, so a heartbeat-old figure is current enough. Cost: one eventually consistent
item read per live peer a heartbeat (half a read unit for an item up to 4 KB), spread over the
table's partitions.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from streamlease.errors import StoreError
from streamlease.model import WorkerInfo
from streamlease.session_store import SessionStore, WorkerLoad
from worker.logs import describe, logger


class PeerLoads:
    """The last load figures read from each live peer's item."""

    def __init__(self, sessions: SessionStore, every_seconds: float) -> None:
        """``every_seconds``: how often the figures are re-read (the heartbeat)."""
        self._sessions = sessions
        self._every = every_seconds
        self._loads: dict[str, WorkerLoad] = {}
        self._read_mono = -float("inf")

    def due(self, peers: Sequence[str], now: float) -> bool:
        """A read is due at monotonic ``now``: a heartbeat since the last, or a peer unknown."""
        return now - self._read_mono >= self._every or any(p not in self._loads for p in peers)

    async def with_loads(
        self, workers: Sequence[WorkerInfo], me: str, now: float
    ) -> list[WorkerInfo]:
        """``workers`` (index items, no figures) with each live peer's figures as last read;
        re-read first when :meth:`due` (every live peer once a heartbeat, else only those not
        read yet). A failed read drops every figure (counts decide until a read succeeds)."""
        peers = [w.worker_id for w in workers if w.worker_id != me and w.is_live]
        if peers and self.due(peers, now):
            every = now - self._read_mono >= self._every
            wanted = peers if every else [p for p in peers if p not in self._loads]
            if every:
                self._read_mono = now
            try:
                read = await asyncio.to_thread(self._sessions.read_loads, wanted)
            except StoreError as exc:
                logger.info("peer loads not read", error=describe(exc))
                self._loads = {}
                return list(workers)
            kept = {} if every else {p: self._loads[p] for p in peers if p in self._loads}
            self._loads = kept | {p: read.get(p, WorkerLoad(None, None)) for p in wanted}
        return [self._merged(w) for w in workers]

    def _merged(self, worker: WorkerInfo) -> WorkerInfo:
        load = self._loads.get(worker.worker_id)
        if load is None:
            return worker
        return dataclasses.replace(
            worker, load_milli=load.load_milli, cpu_permille=load.cpu_permille
        )
