"""The lease event log's one definition: field names, kinds and the record of one line.

A worker writes the log (``Settings.lease_event_log``, JSONL, one object per ownership change);
the local stack's console, the test bed and the invariant checker read it. Each line is
``{"event", "stream_id", "epoch", "worker_id", "mono", "wall_ms"}`` (:class:`LeaseEventField`)
plus ``"deadline_mono"`` on ``acquired``/``renewed``/``session_renewed`` (until when the holder
may deliver) and on ``fenced`` (the deadline that passed). ``mono`` is :func:`time.monotonic`,
one clock for every process of a Linux machine, so events of different workers compare
directly; ``wall_ms`` is the wall clock in epoch milliseconds, to place a sink record's
``received_at_ms`` on ``mono``. ``worker_id`` is the holder's session id (a process that lost
its session continues under a new one).

What each kind promises, so a checker can prove that no two holders overlapped:

- ``acquired``: the holder may deliver from ``mono`` until ``deadline_mono``;
- ``renewed``: the deadline moved to ``deadline_mono`` (a per-stream renewal that succeeded);
- ``session_renewed`` (no stream, epoch 0): the deadline of *every* stream attached to session
  ``worker_id`` moved to ``deadline_mono``;
- ``fenced``: the holder stopped delivering because its deadline passed (or it gave up before);
  nothing was delivered after ``mono``;
- ``lost``: DynamoDB said the lease is someone else's; nothing was delivered after ``mono``;
- ``stopped``: the stream was stopped; the holder stopped delivering (``released`` follows);
- ``released``: written after DynamoDB's release returned, delivery having ended before it;
- ``handoff``: a handoff command was sent after the release;
- ``changed``: the stream's URL or profile was changed in place and its holder reconnects with
  them under the same epoch, from its checkpoint (the holding goes on: not terminal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final


class LeaseEventField:
    """Key names of a lease event line (the attributes of :class:`LeaseEvent`)."""

    EVENT: Final = "event"
    """The kind: a :class:`LeaseEventKind` value."""
    STREAM_ID: Final = "stream_id"
    """``""`` on ``session_renewed``."""
    EPOCH: Final = "epoch"
    """The holding's lease epoch; 0 on ``session_renewed``."""
    WORKER_ID: Final = "worker_id"
    MONO: Final = "mono"
    WALL_MS: Final = "wall_ms"
    DEADLINE_MONO: Final = "deadline_mono"
    """Present only where a deadline is known (see the module docstring)."""


class LeaseEventKind(StrEnum):
    """Values of :attr:`LeaseEventField.EVENT`: what happened to a holding."""

    ACQUIRED = "acquired"
    RENEWED = "renewed"
    SESSION_RENEWED = "session_renewed"
    FENCED = "fenced"
    RELEASED = "released"
    LOST = "lost"
    STOPPED = "stopped"
    HANDOFF = "handoff"
    CHANGED = "changed"


TERMINAL_KINDS: Final = frozenset(
    {LeaseEventKind.RELEASED, LeaseEventKind.FENCED, LeaseEventKind.LOST, LeaseEventKind.STOPPED}
)
"""Kinds after which the holding delivers nothing more (until it is acquired again)."""


@dataclass(frozen=True)
class LeaseEvent:
    """One line of a lease event log. Attribute names are :class:`LeaseEventField`'s."""

    event: LeaseEventKind
    stream_id: str
    epoch: int
    worker_id: str
    mono: float
    """:func:`time.monotonic` seconds when it happened."""
    wall_ms: int = 0
    """Wall clock at the same moment, epoch milliseconds (0: unknown)."""
    deadline_mono: float | None = None
    """The holder's self-fencing deadline, monotonic seconds, where the kind carries one."""

    def to_dict(self) -> dict[str, Any]:
        """The line's JSON object; ``deadline_mono`` only when there is one."""
        line: dict[str, Any] = {
            LeaseEventField.EVENT: str(self.event),
            LeaseEventField.STREAM_ID: self.stream_id,
            LeaseEventField.EPOCH: self.epoch,
            LeaseEventField.WORKER_ID: self.worker_id,
            LeaseEventField.MONO: self.mono,
            LeaseEventField.WALL_MS: self.wall_ms,
        }
        if self.deadline_mono is not None:
            line[LeaseEventField.DEADLINE_MONO] = self.deadline_mono
        return line

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeaseEvent:
        """Parse one line's object. Raises ``KeyError``/``ValueError``/``TypeError`` when it is
        malformed (a missing field, an unknown kind, a value of the wrong type)."""
        deadline = data.get(LeaseEventField.DEADLINE_MONO)
        return cls(
            event=LeaseEventKind(str(data[LeaseEventField.EVENT])),
            stream_id=str(data[LeaseEventField.STREAM_ID]),
            epoch=int(data[LeaseEventField.EPOCH]),
            worker_id=str(data[LeaseEventField.WORKER_ID]),
            mono=float(data[LeaseEventField.MONO]),
            wall_ms=int(data.get(LeaseEventField.WALL_MS, 0)),
            deadline_mono=None if deadline is None else float(deadline),
        )
