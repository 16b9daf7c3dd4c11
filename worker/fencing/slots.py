"""A session's checkpoint slots: which slot each held stream has, and what the vector says.

Every stream attached to a session gets a *slot* at acquire (stored on the stream item); each
session renewal carries ``(epoch, stream tag, acknowledged seq)`` per slot
(:mod:`streamlease.checkpoints`). A takeover applies a slot's entry only to a stream of the same
epoch and tag, and relies on a slot's entry at any renewal belonging to the one stream then in
it. So:

- a freed slot is *quarantined* until a renewal sent after the release succeeded (that renewal
  wrote it empty);
- a slot whose stream item may still name it — an acquire whose answer was lost (its write may
  still land), a release that got no answer — is *lost*: never reserved again until a
  consistent read of that stream shows the item no longer names it (:meth:`SlotTable.recover`;
  for an acquire, no sooner than a write still on its way could land).

There are ``2 × capacity`` slots, so quarantine and a few lost slots cost no capacity. Past
that, :meth:`SlotTable.usable_capacity` says how many streams the session can still hold (the
worker advertises that, not its configured capacity), and below half the configured capacity the
session is worth replacing by a fresh one (:meth:`SlotTable.needs_rollover`).

A held slot's entry is a :class:`HeldCheckpoint` its holder moves in place: each acknowledged
batch stores its seq into ``last_seq`` (one attribute store, no call), and each renewal reads
every entry as it is then. Until its stream's first delivery an entry's seq is
:data:`~streamlease.seqs.NOTHING_DELIVERED`, which the vector does not carry: the slot stays
empty, and a takeover resumes from the stream item, whose ``last_seq`` says nothing was
delivered too (the holder started from it). The table is written by the event loop and read by
the renewal thread: entries are set whole (one list store), a seq is one attribute store, and
the thread copies the list before it reads the entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamlease import checkpoints
from streamlease.checkpoints import Checkpoint
from streamlease.seqs import MAX_SEQ, NOTHING_DELIVERED


class HeldCheckpoint:
    """The entry of a held slot: the stream's epoch and tag, and the last seq its sink
    acknowledged — moved in place by the holder (:attr:`last_seq`), read by every renewal."""

    __slots__ = ("epoch", "last_seq", "tag")

    def __init__(self, epoch: int, last_seq: int, tag: int) -> None:
        self.epoch = epoch
        self.last_seq = last_seq
        self.tag = tag

    def __repr__(self) -> str:
        return f"HeldCheckpoint({self.epoch}, {self.last_seq}, {self.tag})"


@dataclass(frozen=True)
class LostSlot:
    """A slot the item of ``stream_id`` may still name; checked no sooner than
    ``check_after_mono``."""

    stream_id: str
    check_after_mono: float


class SlotTable:
    """Slots ``0 .. max_slots-1`` of one session."""

    def __init__(self, max_slots: int) -> None:
        """``max_slots``: the most slots ever in use (held, reserved, quarantined or lost)."""
        self.max_slots = max_slots
        self._entries: list[HeldCheckpoint | None] = []
        self._in_use: set[int] = set()
        self._freed_at: dict[int, float] = {}
        self._lost: dict[int, LostSlot] = {}

    def reserve(self, cleared_before_mono: float) -> int | None:
        """The lowest usable slot, now reserved; None when every slot is taken.

        ``cleared_before_mono``: send time of the last successful renewal; a slot freed before
        it has been written empty since, and may be used again.
        """
        for slot in range(self.max_slots):
            if slot in self._in_use or slot in self._lost:
                continue
            freed = self._freed_at.get(slot)
            if freed is not None and freed >= cleared_before_mono:
                continue
            self._freed_at.pop(slot, None)
            self._in_use.add(slot)
            self._set(slot, None)
            return slot
        return None

    def hold(self, slot: int, entry: HeldCheckpoint) -> None:
        """The stream in ``slot`` is held: ``entry`` (epoch, stream tag, acknowledged seq, which
        its holder moves from now on; :data:`~streamlease.seqs.NOTHING_DELIVERED` before the
        first delivery). Raises ``ValueError`` for an entry the vector cannot carry: the one
        holder fails here, instead of every renewal of the session failing to encode it."""
        seq = entry.last_seq
        if not checkpoints.carriable(
            entry.epoch, 0 if seq == NOTHING_DELIVERED else seq, entry.tag
        ):
            raise ValueError(f"checkpoint out of range: {entry!r}")
        self._set(slot, entry)

    def cancel(self, slot: int) -> None:
        """The acquire for ``slot`` did not win, and its write can no longer land."""
        self._in_use.discard(slot)
        self._set(slot, None)

    def lose(self, slot: int, stream_id: str, check_after_mono: float) -> None:
        """The item of ``stream_id`` may name ``slot`` (an acquire or release got no answer):
        its entry is emptied, and the slot is not used again until :meth:`recover`."""
        self._in_use.discard(slot)
        self._freed_at.pop(slot, None)
        self._set(slot, None)
        self._lost[slot] = LostSlot(stream_id, check_after_mono)

    def lost_due(self, now_mono: float) -> list[tuple[int, str]]:
        """``(slot, stream id)`` of the lost slots whose stream may be read now to settle them."""
        return [
            (s, lost.stream_id)
            for s, lost in self._lost.items()
            if lost.check_after_mono <= now_mono
        ]

    def recover(self, slot: int, now_mono: float) -> None:
        """A consistent read showed the stream item no longer names ``slot``: usable again after
        the quarantine of a freed slot."""
        if self._lost.pop(slot, None) is not None:
            self._freed_at[slot] = now_mono

    def free(self, slot: int, now_mono: float) -> None:
        """The stream in ``slot`` was released (or lost): empty, quarantined from ``now_mono``."""
        self._in_use.discard(slot)
        self._set(slot, None)
        self._freed_at[slot] = now_mono

    def entry(self, slot: int) -> Checkpoint | None:
        """What a renewal now would say for ``slot``."""
        entries = self._entries
        return _carried(entries[slot]) if slot < len(entries) else None

    def vector(self) -> bytes:
        """The checkpoint vector of this moment (called from the renewal thread). A seq the
        vector cannot carry (beyond 2^63 − 1: a feed numbered by the worker that long; nothing
        delivered yet) leaves its slot empty rather than failing the session's renewal: a
        takeover then resumes that stream from its item's checkpoint."""
        return checkpoints.encode([_carried(held) for held in list(self._entries)])

    @property
    def in_use(self) -> int:
        """Slots held or reserved."""
        return len(self._in_use)

    @property
    def lost(self) -> int:
        """Slots lost to an unknown outcome and not recovered yet."""
        return len(self._lost)

    def usable_capacity(self, capacity: int) -> int:
        """How many streams this session can hold at once: ``capacity``, or fewer once the lost
        slots eat into it."""
        return max(0, min(capacity, self.max_slots - len(self._lost)))

    def needs_rollover(self, capacity: int) -> bool:
        """True once lost slots leave room for less than half of ``capacity``."""
        return 2 * self.usable_capacity(capacity) < capacity

    def _set(self, slot: int, entry: HeldCheckpoint | None) -> None:
        entries = self._entries
        if slot >= len(entries):
            if entry is None:
                return
            entries.extend([None] * (slot + 1 - len(entries)))
        entries[slot] = entry


def _carried(held: HeldCheckpoint | None) -> Checkpoint | None:
    """What the vector says for ``held`` (see :meth:`SlotTable.vector`)."""
    if held is None:
        return None
    seq = held.last_seq  # read once: the event loop may move it meanwhile
    return Checkpoint(held.epoch, seq, held.tag) if 0 <= seq <= MAX_SEQ else None
