"""Human-readable output of the CLI: tables, durations, worker names, connection states.

A stream's connection state (``connection_state``, ``connection_since``, ``last_error_active``)
and progress (``frames_*``, ``seq_gaps``, ``last_message_at``) come from newer APIs only; where
a field is missing the text is ``-``, as for any other value an API does not send.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from streamlease.schema import TROUBLE_STATES, ConnectionState, DesiredState

NONE: Final = "-"
NOTHING_DELIVERED_TEXT: Final = "none delivered yet"
"""What ``get`` says for a stream whose sink acknowledged no message (``last_seq`` null; ``ls``
shows :data:`NONE`)."""
ELLIPSIS: Final = "…"
TASK_CHARS: Final = 8
"""Characters of a worker id's task (or host) part that a short worker name keeps."""
NAME_CHARS: Final = 24
"""Longest short name of a worker id that has no task part."""
PAST_ERROR: Final = "(past)"

RED: Final = "1;31"
DIM: Final = "2"


def paint(text: str, style: str, enabled: bool = True) -> str:
    """``text`` in an ANSI ``style`` (:data:`RED`, :data:`DIM`) when ``enabled``."""
    return f"\x1b[{style}m{text}\x1b[0m" if enabled and text else text


def redact_url(url: str) -> str:
    """``url`` without userinfo, query or fragment (they may carry secrets): ``?…`` marks a cut."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    netloc = parts.netloc.rpartition("@")[2]
    tail = "?" + ELLIPSIS if parts.query or parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + tail


def worker_name(worker_id: str | None) -> str:
    """The name a worker goes by wherever it is shown: in every CLI table and on the local
    stack's console. Its id with the task (or host) part cut to :data:`TASK_CHARS` characters:
    ``0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12`` → ``0f1e2d3c…/4242-ab12``. A worker
    *process* is named the same way from ``<task id>/<pid>``, so its sessions' names extend
    it. ``get`` and ``--json`` show ids whole.
    """
    if not worker_id:
        return NONE
    base, sep, rest = worker_id.partition("/")
    if sep:
        cut = base if len(base) <= TASK_CHARS + 1 else base[:TASK_CHARS] + ELLIPSIS
        return f"{cut}/{rest}"
    if len(worker_id) <= NAME_CHARS:
        return worker_id
    return worker_id[: NAME_CHARS - 1] + ELLIPSIS


def seconds_text(ms: float | None) -> str:
    """Milliseconds as ``1.2s`` / ``42s`` / ``3m05s`` / ``2h01m`` / ``3d04h``; ``-`` for None."""
    if ms is None:
        return NONE
    seconds = ms / 1000
    if abs(seconds) < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def lease_text(stream: Mapping[str, Any]) -> str:
    """What is left of a stream's lease: ``12.3s``, ``expired`` or ``-`` when nobody holds it."""
    if not stream.get("owner"):
        return NONE
    if stream.get("lease_state") == "expired":
        return "expired"
    remaining = stream.get("lease_remaining_ms")
    if remaining is None:
        return NONE
    return "expired" if remaining <= 0 else seconds_text(remaining)


def now_ms() -> int:
    """Wall-clock milliseconds (the API's times are wall-clock)."""
    return time.time_ns() // 1_000_000


def age_ms(iso: Any, at_ms: int) -> int | None:
    """Milliseconds from the ISO-8601 time ``iso`` to ``at_ms``; None if it does not parse."""
    if not isinstance(iso, str) or not iso:
        return None
    try:
        moment = dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return max(0, at_ms - int(moment.timestamp() * 1000))


TROUBLE_MEANINGS: Final = {
    ConnectionState.RETRYING: "reconnecting with backoff, nothing flows meanwhile",
    ConnectionState.REJECTED: "the upstream refuses it, nothing flows",
    ConnectionState.STALLED: "connected, but the upstream has sent nothing for a while",
    ConnectionState.MALFORMED: "frames arrive but none can be delivered",
    ConnectionState.SINK_FAILING: "the sink keeps refusing its records, nothing is delivered",
}
"""What each trouble state means to an operator, in words ``get`` shows."""


def trouble_of(stream: Mapping[str, Any]) -> ConnectionState | None:
    """The trouble state of a started stream (one of ``TROUBLE_STATES``: held, nothing
    delivered), or None."""
    state = stream.get("connection_state")
    if stream.get("desired_state") != DesiredState.STARTED or state not in TROUBLE_STATES:
        return None
    return ConnectionState(str(state))


def connection_text(stream: Mapping[str, Any], at_ms: int) -> str:
    """``connected 3m05s``: the connection state and how long it has lasted. A trouble state
    is in capitals (``REJECTED 12s``, ``STALLED 2m05s``) to stand out; ``-`` when the API does
    not say."""
    state = stream.get("connection_state")
    if not state:
        return NONE
    text = str(state).upper() if state in TROUBLE_STATES else str(state)
    age = age_ms(stream.get("connection_since"), at_ms)
    return text if age is None else f"{text} {seconds_text(age)}"


def count_text(count: Any) -> str:
    """A count in at most five characters: ``1204``, ``12.3k``, ``4.1M``; ``-`` for None."""
    if not isinstance(count, int):
        return NONE
    if count < 10_000:
        return str(count)
    if count < 100_000:  # cut, never rounded up: 99,999 is 99.9k
        return f"{count // 100 / 10:.1f}k"
    if count < 1_000_000:
        return f"{count // 1000}k"
    return f"{count // 100_000 / 10:.1f}M"


def trouble_summary(streams: Iterable[Mapping[str, Any]]) -> str:
    """``3 streams in trouble: rejected 1, stalled 2``; ``""`` when none is."""
    states = [state for state in map(trouble_of, streams) if state is not None]
    if not states:
        return ""
    counts = ", ".join(f"{state} {states.count(state)}" for state in sorted(set(states)))
    noun = "stream" if len(states) == 1 else "streams"
    return f"{len(states)} {noun} in trouble: {counts}"


def cell(value: Any) -> str:
    """A table cell: ``-`` for missing values, the text otherwise (one line)."""
    if value is None or value == "":
        return NONE
    return " ".join(str(value).split())


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    right: str = "",
    width: int | None = None,
) -> list[str]:
    """Aligned text table lines. Columns whose header is in ``right`` are right-aligned.

    With ``width``, the last column is narrowed (its cells clipped) so that lines fit; lines
    still too wide are cut.
    """
    body = [list(row) for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    if width is not None:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess > 0:
            widths[-1] = max(widths[-1] - excess, len(headers[-1]))
            for row in body:
                row[-1] = clip(row[-1], widths[-1])
    aligned_right = {i for i, h in enumerate(headers) if h in right.split(",")}

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if i in aligned_right else v.ljust(widths[i])
            for i, v in enumerate(values)
        ]
        text = "  ".join(parts).rstrip()
        return text if width is None else text[:width]

    return [line(headers)] + [line(row) for row in body]


def fit_columns(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    width: int,
    *,
    drop: Sequence[str],
    last_min: int = 0,
) -> tuple[list[str], list[list[str]]]:
    """The columns of a table that fit ``width``: those named in ``drop`` are removed, in that
    order, until every column but the last fits whole and the last keeps at least its header's
    width, or ``last_min`` characters (:func:`table` narrows only that one). Values are never
    abbreviated."""
    kept, body = list(headers), [list(row) for row in rows]

    def needed() -> int:
        widths = [max([len(h), *(len(row[i]) for row in body)]) for i, h in enumerate(kept)]
        last = min(widths[-1], max(len(kept[-1]), last_min))
        return sum(widths[:-1]) + 2 * (len(widths) - 1) + last

    for name in drop:
        if needed() <= width:
            break
        if name in kept:
            index = kept.index(name)
            del kept[index]
            for row in body:
                del row[index]
    return kept, body


def pack(parts: Sequence[str], width: int, separator: str = "  ") -> list[str]:
    """``parts`` joined into as few lines of at most ``width`` characters as they go (a part
    is never split; one longer than ``width`` is a line of its own)."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(separator) + len(part) <= width:
            lines[-1] += separator + part
        else:
            lines.append(part)
    return lines


def row_colour(line: str, stream: Mapping[str, Any], enabled: bool) -> str:
    """A table line painted for its stream: red when in trouble, else as it is."""
    return paint(line, RED, enabled) if trouble_of(stream) else line


WORKER_HEADERS: Final = ("WORKER", "STATE", "STREAMS", "HEARTBEAT", "HOST", "PID", "VERSION")


def worker_row(worker: Mapping[str, Any]) -> list[str]:
    """One row of the worker table (:data:`WORKER_HEADERS`)."""
    count = worker.get("stream_count")
    capacity = worker.get("capacity")
    streams = cell(count) if capacity is None else f"{cell(count)}/{capacity}"
    age = worker.get("heartbeat_age_ms")
    return [
        worker_name(worker.get("id")),
        cell(worker.get("state")),
        streams,
        NONE if age is None else seconds_text(age) + " ago",
        cell(worker.get("host")),
        cell(worker.get("pid")),
        cell(worker.get("version")),
    ]


def profile_detail(stream: Mapping[str, Any]) -> list[str]:
    """The connection profile, one ``profile:`` line per field (secrets by reference, as the
    API shows them; ``default`` without one), and the failover note when there is one."""
    profile = stream.get("profile") or {}
    lines = [] if profile else [f"{'profile:':<15}default"]
    for index, (key, value) in enumerate(sorted(profile.items())):
        label = "profile:" if index == 0 else ""
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        lines.append(f"{label:<15}{key} {text}")
    note = stream.get("failover_note")
    if note:
        lines.append(f"{'failover:':<15}{note}")
    return lines


def connection_detail(stream: Mapping[str, Any], at_ms: int, colour: bool = False) -> str:
    """``connected since 2026-…Z (3m05s)``; for a stream in trouble, what that means."""
    state = stream.get("connection_state")
    if not state:
        return NONE
    since = stream.get("connection_since")
    age = age_ms(since, at_ms)
    text = str(state) if not since else f"{state} since {since}"
    if age is not None:
        text += f" ({seconds_text(age)})"
    trouble = trouble_of(stream)
    if trouble is not None:
        text = paint(f"{text}: {TROUBLE_MEANINGS[trouble]}", RED, colour)
    return text


def stream_summary(stream: Mapping[str, Any]) -> str:
    """One line about a stream after a change: state, owner, generation."""
    return (
        f"{cell(stream.get('id'))}: {cell(stream.get('desired_state'))}, "
        f"owner {worker_name(stream.get('owner'))}, generation {cell(stream.get('generation'))}"
    )
