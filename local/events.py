"""What the local stack prints: one short line per notable event, never raw JSON.

:class:`Console` writes timestamped lines. :class:`LeaseEventTailer` follows the workers' lease
event logs (``Settings.lease_event_log``, one file per worker) and turns ownership changes into
lines: a stream **owned** for the first time, **handed off** after a graceful release, **taken
over** from a holder that did not release it (crashed or fenced), **lost** by a holder,
**stopped**, or **resumed** (owned again after a stop, by whichever worker). Renewals are not
events. When one poll finds many alike (a worker's streams all moving at once) they are folded
into one line. Workers are named as the CLI names them (:func:`worker_name`), so a line here
and a row of ``streamlease watch`` say the same name.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from local.jsonl_tail import JsonlTail
from streamlease.cli.render import worker_name
from streamlease.lease_events import LeaseEvent, LeaseEventKind

FOLD_AFTER: Final = 3
"""More alike events than this in one poll are printed as one line."""

_COLOURS: Final = {
    "owned": "32",
    "resumed": "32",
    "handoff": "36",
    "takeover": "33",
    "lost": "31",
    "died": "31",
    "failed": "31",
    "warning": "33",
    "started": "32",
    "restarted": "33",
}


class Console:
    """Writes ``HH:MM:SS.mmm  kind      text`` lines (kinds coloured on a terminal)."""

    def __init__(self, out: TextIO, *, colour: bool | None = None) -> None:
        self._out = out
        self._colour = out.isatty() if colour is None else colour

    def line(self, kind: str, text: str) -> None:
        """Print one event line."""
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        label = f"{kind:<9}"
        if self._colour and kind in _COLOURS:
            label = f"\x1b[{_COLOURS[kind]}m{label}\x1b[0m"
        self._out.write(f"{stamp}  {label} {text}\n")
        self._out.flush()

    def text(self, text: str = "") -> None:
        """Print a plain line (banners, hints)."""
        self._out.write(text + "\n")
        self._out.flush()


@dataclass
class _Holder:
    worker_id: str
    epoch: int
    released: bool = False
    stopping: bool = False


@dataclass(frozen=True)
class _Change:
    kind: str
    stream_id: str
    epoch: int
    new: str
    old: str = ""


class LeaseEventTailer:
    """Follows every ``*.jsonl`` lease event log in ``directory`` and reports ownership changes.

    ``emit(kind, text)`` prints a line; ``name_of`` turns a worker id into the name shown
    (default: :func:`worker_name`, as everywhere else). Call :meth:`pump` regularly; it reads
    only what was appended since the last call and keeps a torn last line for the next one
    (:class:`~local.jsonl_tail.JsonlTail`).
    """

    def __init__(
        self,
        directory: Path,
        emit: Callable[[str, str], None],
        name_of: Callable[[str], str] = worker_name,
    ) -> None:
        self._directory = directory
        self._name_of = name_of
        self._emit = emit
        self._tail = JsonlTail(LeaseEvent.from_dict)
        self._holders: dict[str, _Holder] = {}

    def pump(self) -> int:
        """Read new events and print their lines. Returns how many events were read."""
        for path in sorted(self._directory.glob("*.jsonl")):
            self._tail.follow(path)  # a worker started since the last call
        events = self._tail.read_new()
        events.sort(key=lambda e: e.mono)
        changes = [c for c in (self._apply(e) for e in events) if c is not None]
        self._print(changes)
        return len(events)

    def _apply(self, event: LeaseEvent) -> _Change | None:
        kind = event.event
        stream_id, worker_id, epoch = event.stream_id, event.worker_id, event.epoch
        holder = self._holders.get(stream_id)
        mine = holder is not None and holder.worker_id == worker_id and holder.epoch == epoch
        if kind == LeaseEventKind.ACQUIRED:
            self._holders[stream_id] = _Holder(worker_id, epoch)
            if holder is None:
                return _Change("owned", stream_id, epoch, worker_id)
            if mine:
                return None  # a lapsed holder took its own lease back
            if holder.stopping:  # stopped, released, now started again: not a handover
                return _Change("resumed", stream_id, epoch, worker_id)
            if holder.released and holder.worker_id == worker_id:
                return _Change("owned", stream_id, epoch, worker_id)  # its own release back
            if holder.released:
                return _Change("handoff", stream_id, epoch, worker_id, holder.worker_id)
            return _Change("takeover", stream_id, epoch, worker_id, holder.worker_id)
        if not mine or holder is None:
            return None
        if kind == LeaseEventKind.STOPPED:
            holder.stopping = True
        elif kind == LeaseEventKind.RELEASED:
            holder.released = True
            if holder.stopping:
                return _Change("stopped", stream_id, epoch, worker_id)
        elif kind in (LeaseEventKind.FENCED, LeaseEventKind.LOST):
            return _Change("lost", stream_id, epoch, worker_id, str(kind))
        return None

    def _print(self, changes: list[_Change]) -> None:
        groups: dict[tuple[str, str, str], list[_Change]] = defaultdict(list)
        for change in changes:
            groups[(change.kind, change.new, change.old)].append(change)
        for (kind, new, old), items in groups.items():
            if len(items) > FOLD_AFTER:
                self._emit(kind, self._folded(kind, new, old, items))
            else:
                for item in items:
                    self._emit(kind, self._single(item))

    def _single(self, c: _Change) -> str:
        new, old = self._name_of(c.new), self._name_of(c.old) if c.old else ""
        if c.kind == "owned":
            return f"{c.stream_id} owned by {new} (epoch {c.epoch})"
        if c.kind == "resumed":
            return f"{c.stream_id} resumed, owned by {new} (epoch {c.epoch})"
        if c.kind == "handoff":
            return f"{c.stream_id} handed off {old} → {new} (epoch {c.epoch})"
        if c.kind == "takeover":
            return f"{c.stream_id} taken over by {new} from {old} (epoch {c.epoch})"
        if c.kind == "lost":
            return f"{c.stream_id} lost by {new}: {c.old} (epoch {c.epoch})"
        return f"{c.stream_id} stopped, released by {new}"

    def _folded(self, kind: str, new: str, old: str, items: list[_Change]) -> str:
        ids = [c.stream_id for c in items]
        shown = ", ".join(ids[:FOLD_AFTER]) + (f", … (+{len(ids) - FOLD_AFTER})")
        who, was = self._name_of(new), self._name_of(old) if old else ""
        verb = {
            "owned": f"owned by {who}",
            "resumed": f"resumed, owned by {who}",
            "handoff": f"handed off {was} → {who}",
            "takeover": f"taken over by {who} from {was}",
            "lost": f"lost by {who} ({old})",
            "stopped": f"stopped, released by {who}",
        }[kind]
        return f"{len(items)} streams {verb}: {shown}"
