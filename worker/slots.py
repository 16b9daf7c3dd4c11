"""A session's checkpoint slots: which slot each held stream has, and what the vector says.

Every stream attached to a session gets a *slot* at acquire (stored on the stream item); each
session renewal carries ``(epoch, acknowledged seq)`` per slot (:mod:`streamlease.checkpoints`).
A takeover applies a slot's entry only to a stream of the *same epoch*, which is safe only if a
slot's entry at any renewal belongs to the one stream then in it. So a freed slot is
*quarantined* until a renewal sent after the release succeeded (that renewal wrote it empty),
and a slot whose acquire got no answer (its write may still land) is never used again.

The table is written by the event loop and read by the renewal thread: entries are replaced
whole (one list store), and the thread copies the list before encoding it.
"""

from __future__ import annotations

from streamlease import checkpoints
from streamlease.checkpoints import Checkpoint


class SlotTable:
    """Slots ``0 .. max_slots-1`` of one session."""

    def __init__(self, max_slots: int) -> None:
        """``max_slots``: the most slots ever in use (held, reserved or quarantined)."""
        self.max_slots = max_slots
        self._entries: list[Checkpoint | None] = []
        self._in_use: set[int] = set()
        self._freed_at: dict[int, float] = {}
        self._burned: set[int] = set()

    def reserve(self, cleared_before_mono: float) -> int | None:
        """The lowest usable slot, now reserved; None when every slot is taken.

        ``cleared_before_mono``: send time of the last successful renewal; a slot freed before
        it has been written empty since, and may be used again.
        """
        for slot in range(self.max_slots):
            if slot in self._in_use or slot in self._burned:
                continue
            freed = self._freed_at.get(slot)
            if freed is not None and freed >= cleared_before_mono:
                continue
            self._freed_at.pop(slot, None)
            self._in_use.add(slot)
            self._set(slot, None)
            return slot
        return None

    def hold(self, slot: int, epoch: int, seq: int) -> None:
        """The stream in ``slot`` is held at ``epoch`` and acknowledged up to ``seq``."""
        entries = self._entries
        if slot < len(entries):  # every acknowledged batch comes here: the common case first
            entries[slot] = (epoch, seq)
        else:
            self._set(slot, (epoch, seq))

    def cancel(self, slot: int, *, landed_unknown: bool = False) -> None:
        """The acquire for ``slot`` did not win. ``landed_unknown``: its answer was lost, so
        its write may still land with this slot on the stream item: never use it again."""
        self._in_use.discard(slot)
        self._set(slot, None)
        if landed_unknown:
            self._burned.add(slot)

    def free(self, slot: int, now_mono: float) -> None:
        """The stream in ``slot`` was released (or lost): empty, quarantined from ``now_mono``."""
        self._in_use.discard(slot)
        self._set(slot, None)
        self._freed_at[slot] = now_mono

    def entry(self, slot: int) -> Checkpoint | None:
        """What the next renewal will say for ``slot``."""
        entries = self._entries
        return entries[slot] if slot < len(entries) else None

    def vector(self) -> bytes:
        """The checkpoint vector of this moment (called from the renewal thread)."""
        return checkpoints.encode(list(self._entries))

    @property
    def in_use(self) -> int:
        """Slots held or reserved."""
        return len(self._in_use)

    def _set(self, slot: int, entry: Checkpoint | None) -> None:
        entries = self._entries
        if slot >= len(entries):
            if entry is None:
                return
            entries.extend([None] * (slot + 1 - len(entries)))
        entries[slot] = entry
