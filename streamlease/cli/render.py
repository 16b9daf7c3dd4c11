"""Human-readable output of the CLI: tables, durations, short owner names, redacted URLs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

NONE: Final = "-"


def redact_url(url: str) -> str:
    """``url`` without userinfo, query or fragment (they may carry secrets): ``?…`` marks a cut."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    netloc = parts.netloc.rpartition("@")[2]
    tail = "?…" if parts.query or parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + tail


def short_owner(owner: str | None, width: int = 22) -> str:
    """A worker id short enough for a table: ``<task id>/<pid>-<hex>`` with the task id cut."""
    if not owner:
        return NONE
    if len(owner) <= width:
        return owner
    task, sep, rest = owner.rpartition("/")
    if sep and len(rest) < width - 2:
        keep = max(width - len(rest) - 2, 4)
        return f"{task[:keep]}…/{rest}"
    return owner[: width - 1] + "…"


def seconds_text(ms: float | None) -> str:
    """Milliseconds as ``1.2s`` / ``42s`` / ``3m05s`` / ``2h01m``; ``-`` for ``None``."""
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
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


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


def cell(value: Any) -> str:
    """A table cell: ``-`` for missing values, the text otherwise (one line)."""
    if value is None or value == "":
        return NONE
    return " ".join(str(value).split())


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, right: str = "") -> list[str]:
    """Aligned text table lines. Columns whose header is in ``right`` are right-aligned."""
    body = [list(row) for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    aligned_right = {i for i, h in enumerate(headers) if h in right.split(",")}

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if i in aligned_right else v.ljust(widths[i])
            for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers)] + [line(row) for row in body]


STREAM_HEADERS: Final = (
    "ID",
    "STATE",
    "OWNER",
    "LEASE",
    "EPOCH",
    "LAST_SEQ",
    "TAKEOVERS",
    "LAST_ERROR",
)


def stream_row(stream: Mapping[str, Any]) -> list[str]:
    """One row of the stream table (:data:`STREAM_HEADERS`)."""
    return [
        cell(stream.get("id")),
        cell(stream.get("desired_state")),
        short_owner(stream.get("owner")),
        lease_text(stream),
        cell(stream.get("epoch")),
        cell(stream.get("last_seq")),
        cell(stream.get("takeovers")),
        cell(stream.get("last_error"))[:40],
    ]


WORKER_HEADERS: Final = ("WORKER", "STATE", "STREAMS", "HEARTBEAT", "HOST", "PID", "VERSION")


def worker_row(worker: Mapping[str, Any]) -> list[str]:
    """One row of the worker table (:data:`WORKER_HEADERS`)."""
    count = worker.get("stream_count")
    capacity = worker.get("capacity")
    streams = cell(count) if capacity is None else f"{cell(count)}/{capacity}"
    age = worker.get("heartbeat_age_ms")
    return [
        short_owner(worker.get("id"), width=30),
        cell(worker.get("state")),
        streams,
        NONE if age is None else seconds_text(age) + " ago",
        cell(worker.get("host")),
        cell(worker.get("pid")),
        cell(worker.get("version")),
    ]


DETAIL_FIELDS: Final = (
    ("id", "id"),
    ("state", "desired_state"),
    ("url", "ws_url"),
    ("owner", "owner"),
    ("owned since", "owned_since"),
    ("epoch", "epoch"),
    ("last seq", "last_seq"),
    ("generation", "generation"),
    ("takeovers", "takeovers"),
    ("last error", "last_error"),
    ("last error at", "last_error_at"),
    ("created", "created_at"),
    ("created by", "created_by"),
    ("updated", "updated_at"),
    ("updated by", "updated_by"),
)


def stream_detail(stream: Mapping[str, Any]) -> list[str]:
    """``get`` output: one ``label: value`` line per field, the URL redacted, lease left added."""
    lines = []
    for label, key in DETAIL_FIELDS:
        value = stream.get(key)
        text = redact_url(str(value)) if key == "ws_url" and value else cell(value)
        lines.append(f"{label + ':':<15}{text}")
        if key == "owner":
            lines.append(f"{'lease left:':<15}{lease_text(stream)}")
    return lines


def stream_summary(stream: Mapping[str, Any]) -> str:
    """One line about a stream after a change: state, owner, generation."""
    return (
        f"{cell(stream.get('id'))}: {cell(stream.get('desired_state'))}, "
        f"owner {short_owner(stream.get('owner'))}, generation {cell(stream.get('generation'))}"
    )
