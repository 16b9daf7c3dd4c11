"""What an agent asks of the parts fitted onto it: its fleet watcher and its takeover.

They act on the agent (:mod:`bench.fleet_model.watch`, :mod:`bench.fleet_model.takeover`), so the
agent knows them only by what it calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from bench.fleet_model.sessions import Session


class Watching(Protocol):
    """The agent's fleet watcher and orphan finder (:class:`bench.fleet_model.watch.Watch`)."""

    def round(self) -> None:
        """One fleet round."""
        ...

    def refresh_share(self, then: Callable[[], None]) -> None:
        """Re-read the fair share now, then ``then()``."""
        ...

    def find_orphans(self, then: Callable[[list[int]], None]) -> None:
        """One reconcile read of the orphan index; ``then(found)`` with the free streams."""
        ...


class TakingOver(Protocol):
    """The agent's tombstones and sweeps (:class:`bench.fleet_model.takeover.Takeover`)."""

    def busy_with(self, no: int) -> bool:
        """A sweep of session ``no`` runs here."""
        ...

    def expire(self, target: Session, seen_hb: int, weight: float) -> None:
        """Tombstone ``target`` if its ``hb`` is still ``seen_hb``; the winner sweeps it."""
        ...

    def sweep_leftover(self, target: Session, weight: float) -> None:
        """Read the tombstone, then sweep it."""
        ...
