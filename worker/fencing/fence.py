"""A holder's fence: until when it may deliver, and what happens when that time passes.

Two kinds, one per liveness mode (architecture §4):

- :class:`LeaseFence` (per-stream leases): the holder's own deadline, moved by each renewal of
  its lease that succeeds; when it passes, the holding ends (FENCED).
- :class:`SessionFence` (sessions): the deadline of the worker's session, shared by every
  stream attached to it; when it passes, delivery *pauses* until the session renews (or is lost
  with every stream). The acknowledged seq goes into the session's checkpoint slot.

Sinks see either through :class:`~worker.sinks.Deadline` (``remaining_seconds``). The
:class:`DeliveryGate` pauses every stream of a fenced session at once and resumes them together.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from streamlease import checkpoints, rules
from streamlease.settings import Settings
from worker.fencing.session import Session, SessionState
from worker.fencing.slots import HeldCheckpoint


class Deadline(Protocol):
    """A fencing deadline as whoever must not act past it sees it (sinks, before they send).

    Sinks ask it from their own thread, right before sending: it must be cheap and safe to call
    from any thread.
    """

    def remaining_seconds(self) -> float:
        """Seconds before the deadline (0 or less: passed). It may move later, never earlier
        while the holder still delivers."""
        ...


class RenewalTracker(Protocol):
    """The per-stream renewal loop as a fence sees it."""

    def untrack(self, stream_id: str, epoch: int) -> None:
        """Stop renewing this lease (idempotent)."""
        ...


class Fence(Protocol):
    """What a holder asks about its right to deliver."""

    pauses: bool
    """True: past the deadline delivery waits for it to move; False: the holding ends."""

    @property
    def checkpoint(self) -> HeldCheckpoint | None:
        """A session's: the holding's entry in the checkpoint vector, whose ``last_seq`` the
        delivery moves on each acknowledgement and every renewal reads. None for a per-stream
        lease (its renewal carries the holder's acknowledged seq)."""
        ...

    @property
    def deadline_mono(self) -> float:
        """Until when delivery is safe (monotonic seconds)."""
        ...

    @property
    def gone(self) -> bool:
        """True once the deadline can never move again (the session is lost)."""
        ...

    def remaining_seconds(self) -> float:
        """Seconds left before the deadline (negative: past it)."""
        ...

    @property
    def sink_deadline(self) -> Deadline:
        """The deadline the sink checks before it sends this holder's batches: one object for
        every stream of a session, so a store checks it once for all of them."""
        ...

    def extend(self, sent_mono: float) -> float | None:
        """A renewal sent at ``sent_mono`` succeeded (per-stream leases only)."""
        ...

    async def wait_renewed(self, timeout_seconds: float | None) -> None:
        """Return when the deadline may have moved (or after the timeout)."""
        ...

    def stop_renewing(self) -> None:
        """Delivery has ended for good; no more renewals are needed."""
        ...

    def release_unanswered(self) -> None:
        """The holder's last release got no answer: the stream item may still name this
        holding (a session's slot then stays out of use until a read settles it)."""
        ...

    def finish(self) -> None:
        """The holding is over (released, lost or given up): free what it occupied."""
        ...


class LeaseFence:
    """The fence of a per-stream lease: its own deadline, extended by its renewals."""

    __slots__ = ("_deadline", "_epoch", "_renewals", "_settings", "_stream_id", "sent_expires_ms")
    pauses = False
    checkpoint = None

    def __init__(
        self,
        stream_id: str,
        epoch: int,
        deadline_mono: float,
        settings: Settings,
        renewals: RenewalTracker,
    ) -> None:
        self._stream_id = stream_id
        self._epoch = epoch
        self._deadline = deadline_mono
        self._settings = settings
        self._renewals = renewals
        self.sent_expires_ms = 0
        """The highest expiry a renewal of this lease has asked for (expiries only grow)."""

    @property
    def deadline_mono(self) -> float:
        return self._deadline

    @property
    def gone(self) -> bool:
        return False

    def remaining_seconds(self) -> float:
        return self._deadline - time.monotonic()

    @property
    def sink_deadline(self) -> Deadline:
        return self  # its own: no other stream shares it

    def extend(self, sent_mono: float) -> float | None:
        """Move the deadline to ``sent_mono + lease − margin``; returns the deadline in force,
        or None when the answer came after the deadline it would set (it revives nothing)."""
        deadline = rules.fence_deadline_mono(
            sent_mono, self._settings.lease_seconds, self._settings.fence_margin_seconds
        )
        if not rules.is_safe_to_deliver(time.monotonic(), deadline):
            return None
        self._deadline = max(self._deadline, deadline)
        return self._deadline

    async def wait_renewed(self, timeout_seconds: float | None) -> None:
        raise RuntimeError("a per-stream lease does not pause")

    def stop_renewing(self) -> None:
        self._renewals.untrack(self._stream_id, self._epoch)

    def release_unanswered(self) -> None:
        return  # the lease lapses on its own; nothing of the worker's stays named by it

    def finish(self) -> None:
        self._renewals.untrack(self._stream_id, self._epoch)


class SessionDeadline:
    """A session's deadline as sinks see it (one object per session, shared by its streams)."""

    __slots__ = ("__weakref__", "session")

    def __init__(self, session: Session) -> None:
        self.session = session

    def remaining_seconds(self) -> float:
        """Seconds before the session's deadline (-inf once it is not live)."""
        session = self.session  # asked for every batch: kept flat
        if session.state is not SessionState.LIVE:
            return -math.inf
        return session.deadline_mono - time.monotonic()


_SESSION_DEADLINES: Final[weakref.WeakKeyDictionary[Session, SessionDeadline]] = (
    weakref.WeakKeyDictionary()
)


class SessionFence:
    """The fence of a stream attached to a session: the session's deadline, and a slot."""

    __slots__ = (
        "_finished",
        "_release_unanswered",
        "_shared",
        "_stream_id",
        "checkpoint",
        "session",
        "slot",
    )
    pauses = True

    def __init__(
        self, session: Session, slot: int, stream_id: str, epoch: int, last_seq: int
    ) -> None:
        self.session = session
        self.slot = slot
        self._stream_id = stream_id
        self._finished = False
        self._release_unanswered = False
        shared = _SESSION_DEADLINES.get(session)
        if shared is None:
            shared = _SESSION_DEADLINES[session] = SessionDeadline(session)
        self._shared = shared
        self.checkpoint: HeldCheckpoint = HeldCheckpoint(
            epoch, last_seq, checkpoints.stream_tag(stream_id)
        )
        session.slots.hold(slot, self.checkpoint)

    @property
    def sink_deadline(self) -> Deadline:
        return self._shared

    @property
    def deadline_mono(self) -> float:
        session = self.session
        return session.deadline_mono if session.live else -math.inf

    @property
    def gone(self) -> bool:
        return not self.session.live

    def remaining_seconds(self) -> float:
        return self._shared.remaining_seconds()

    def extend(self, sent_mono: float) -> float | None:
        return None  # the session's renewals move the deadline

    async def wait_renewed(self, timeout_seconds: float | None) -> None:
        await self.session.wait_renewed(timeout_seconds)

    def stop_renewing(self) -> None:
        return  # the session renews on; the slot keeps the checkpoint until the release

    def release_unanswered(self) -> None:
        self._release_unanswered = True

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        now = time.monotonic()
        if self._release_unanswered:
            self.session.lose_slot(self.slot, self._stream_id, now, write_may_land=False)
        else:
            self.session.slots.free(self.slot, now)


class Pausable(Protocol):
    """A holder as the delivery gate sees it."""

    def pause_for_fence(self) -> None:
        """Stop reading and delivering if the holder's session is past its deadline (a holder
        of a per-stream lease, or inside its deadline, ignores it); it then waits in the gate."""
        ...

    def resume_after_fence(self) -> None:
        """The deadline moved: deliver what waited, and read again."""
        ...


GATE_IDLE_SECONDS: Final = 0.2
"""How often the gate looks again while the worker has no live session (a new one is opening)."""


class DeliveryGate:
    """Session fencing for every stream at once (architecture §4a).

    When the session's deadline passes, every stream attached to it stops reading and delivering
    (:meth:`Pausable.pause_for_fence`); a holder that finds the deadline passed on its own (a
    batch just arrived) waits here too (:meth:`hold`). When a renewal moves the deadline, every
    one of them resumes at once. If the session is lost instead, the worker ends its holders
    (LOST) and the gate forgets them. One task per worker (:meth:`run`); no task per stream.
    """

    def __init__(self) -> None:
        self._paused: set[Pausable] = set()

    def hold(self, holder: Pausable) -> None:
        """``holder`` paused itself past the deadline: resume it when the session renews."""
        self._paused.add(holder)

    def forget(self, holder: Pausable) -> None:
        """``holder`` ended (idempotent)."""
        self._paused.discard(holder)

    @property
    def paused(self) -> int:
        """How many holders wait for a renewal."""
        return len(self._paused)

    async def run(
        self, session_of: Callable[[], Session | None], holders: Callable[[], Iterable[Pausable]]
    ) -> None:
        """Pause at each deadline, resume at each renewal, until cancelled. ``session_of()``: the
        worker's current session; ``holders()``: every holder now."""
        while True:
            session = session_of()
            if session is None or not session.live:
                self._paused.clear()  # their holders are being ended as lost
                await asyncio.sleep(GATE_IDLE_SECONDS)
                continue
            now = time.monotonic()
            if session.fenced(now):
                for holder in holders():
                    holder.pause_for_fence()
                await session.wait_renewed(None)
                continue
            if self._paused:
                paused, self._paused = self._paused, set()
                for holder in paused:
                    holder.resume_after_fence()
            await session.wait_renewed(session.deadline_mono - now)
