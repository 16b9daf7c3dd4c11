"""Who could deliver when: a holder's delivery segments, from its lease events.

A segment opens at ``acquired`` (or at a ``renewed`` after the holder had lapsed) and ends at the
first of: a terminal event (:data:`streamlease.lease_events.TERMINAL_KINDS`), the
``deadline_mono`` that event carries (when the holder had stopped delivering) or the latest
known ``deadline_mono`` of its renewals (a holder never delivers after its deadline). A
``session_renewed`` event renews every stream its session holds at that moment.
:func:`current_owners` answers "who holds what at this moment" for the test bed;
:func:`local.invariants.checker.check` builds on the same segments.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from local.invariants.model import EXPIRED, Segment
from streamlease.lease_events import TERMINAL_KINDS, LeaseEvent, LeaseEventKind


def segments_of(events: Sequence[LeaseEvent]) -> list[Segment]:
    """The delivery segments of one holder (events of one stream, epoch and worker).

    Each ``acquired`` starts a new *acquisition* (a holder can re-acquire its own lapsed lease
    at the same epoch); renewals extend the current one.
    """
    out: list[Segment] = []
    start: float | None = None
    deadline = 0.0
    acquisition = -1
    first = events[0] if events else None
    for ev in sorted(events, key=lambda e: e.mono):
        if ev.event in (LeaseEventKind.ACQUIRED, LeaseEventKind.RENEWED):
            ev_deadline = ev.mono if ev.deadline_mono is None else ev.deadline_mono
            lapsed = start is not None and ev.mono > deadline
            if start is not None and (lapsed or ev.event == LeaseEventKind.ACQUIRED):
                out.append(_segment(first, start, deadline, EXPIRED, acquisition))
                start = None
            if ev.event == LeaseEventKind.ACQUIRED or acquisition < 0:
                acquisition += 1
            if start is None:
                start, deadline = ev.mono, ev_deadline
            else:
                deadline = max(deadline, ev_deadline)
        elif ev.event in TERMINAL_KINDS and start is not None:
            # A terminal event may say when the holder had stopped delivering (a release sent
            # after its last delivery, its answer lost): a session renewed meanwhile renews
            # every holding on paper, not one that is only waiting to let go.
            end = min(ev.mono, deadline, math.inf if ev.deadline_mono is None else ev.deadline_mono)
            out.append(_segment(first, start, end, ev.event, acquisition))
            start = None
    if start is not None:
        out.append(_segment(first, start, deadline, EXPIRED, acquisition))
    return out


HolderKey = tuple[str, int, str]
"""(stream id, epoch, worker id): one holding."""


def by_holder(events: Iterable[LeaseEvent]) -> dict[HolderKey, list[LeaseEvent]]:
    """Events grouped by holding, each session renewal copied into every holding of its worker
    that it falls into (from the holding's first ``acquired`` to its last terminal event) as a
    ``renewed`` event of that stream."""
    holders: dict[HolderKey, list[LeaseEvent]] = defaultdict(list)
    sessions: dict[str, list[LeaseEvent]] = defaultdict(list)
    for ev in events:
        if ev.event == LeaseEventKind.SESSION_RENEWED:
            sessions[ev.worker_id].append(ev)
        else:
            holders[(ev.stream_id, ev.epoch, ev.worker_id)].append(ev)
    for session_renewals in sessions.values():
        session_renewals.sort(key=lambda e: e.mono)
    for (stream_id, epoch, worker_id), held in holders.items():
        renewals = sessions.get(worker_id)
        if not renewals:
            continue
        start = min((e.mono for e in held if e.event == LeaseEventKind.ACQUIRED), default=None)
        if start is None:
            continue
        end = max((e.mono for e in held if e.event in TERMINAL_KINDS), default=math.inf)
        first = bisect.bisect_left(renewals, start, key=lambda e: e.mono)
        last = bisect.bisect_right(renewals, end, key=lambda e: e.mono)
        held.extend(
            dataclasses.replace(r, event=LeaseEventKind.RENEWED, stream_id=stream_id, epoch=epoch)
            for r in renewals[first:last]
        )
    return holders


def current_owners(
    events: Iterable[LeaseEvent], at: float, *, worker_exits: Mapping[str, float] | None = None
) -> dict[str, str]:
    """Stream → worker id of every holder inside a delivery segment at monotonic ``at`` (its
    last renewal's fencing deadline had not passed and it had not let go yet). ``at`` may lie in
    the past: a holder that let go after it still held the stream then.

    ``worker_exits``: worker id → a monotonic time by which its process had exited; a dead
    worker holds nothing from then on, even before its deadline (the reaper frees its leases
    early, as in :func:`local.invariants.checker.check`). When two segments of one stream still
    cover ``at`` (a holder that died or froze, and the one that took over), the newer epoch is
    the holder.
    """
    holders = by_holder(events)
    exits = worker_exits or {}
    newest: dict[str, tuple[int, str]] = {}
    for (stream_id, epoch, worker_id), held in holders.items():
        if exits.get(worker_id, math.inf) <= at:
            continue
        covers = any(seg.start <= at < seg.end for seg in segments_of(held))
        if covers and epoch > newest.get(stream_id, (-1, ""))[0]:
            newest[stream_id] = (epoch, worker_id)
    return {stream_id: worker_id for stream_id, (_, worker_id) in newest.items()}


def _segment(
    first: LeaseEvent | None, start: float, end: float, reason: str, acquisition: int
) -> Segment:
    assert first is not None
    return Segment(
        first.stream_id, first.epoch, first.worker_id, start, max(start, end), reason, acquisition
    )
