"""The auditor Lambda in the model: once a minute it reads the fleet and every STARTED stream's
owner and connection state (today: the ``by-state-expiry`` STARTED partition, 1 MB pages one
after another; the flat design: ``by-holder`` and the orphan index, whose pages spread over
their partitions)."""

from __future__ import annotations

from typing import Any, Final

from bench.fleet_model.events import Answer
from bench.fleet_model.store import Touch
from bench.fleet_model.units import PAGE_BYTES, pages, read_units
from bench.fleet_model.world import World

AUDIT_SECONDS: Final = 60.0
PAGE_SECONDS: Final = 0.03
"""One 1 MB page's round trip."""


class Auditor:
    """Reads the table once a minute as the auditor does."""

    def __init__(self, world: World[Any]) -> None:
        self.world = world

    def start(self) -> None:
        """First audit at a random moment of the first minute."""
        self.world.sim.after(self.world.rng.random() * AUDIT_SECONDS, self._audit)

    def _audit(self) -> None:
        world = self.world
        world.sim.after(AUDIT_SECONDS, self._audit)
        units = world.units
        reads: list[Touch] = [
            world.fleet_touch(read_units(len(world.fleet) * units.fleet_entry_bytes), write=False)
        ]
        owned = sum(1 for o in world.owner if o >= 0)
        orphan_index = world.design.orphan_index
        if world.design.ring_watch:
            owner_bytes = owned * units.owner_entry_bytes
            for k in range(pages(owner_bytes)):
                part = k % world.store.index_partitions
                size = min(PAGE_BYTES, owner_bytes - k * PAGE_BYTES)
                reads.append(Touch(world.design.owner_index, part, False, read_units(size)))
            free_bytes = world.free.count() * units.orphan_entry_bytes
            reads += world.orphan_read(list(range(world.free.shards)), read_units(free_bytes))
        else:
            started_bytes = len(world.owner) * units.orphan_entry_bytes
            part = world.orphan_touch(0, 0).partition
            for k in range(pages(started_bytes)):
                size = min(PAGE_BYTES, started_bytes - k * PAGE_BYTES)
                reads.append(Touch(orphan_index, part, False, read_units(size)))
        for k, touch in enumerate(reads):
            world.sim.after(k * PAGE_SECONDS, world.read, [touch], _ignore)


def _ignore(_: Answer) -> None:
    return None
