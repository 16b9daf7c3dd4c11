"""A stream as text: the ``ls`` and ``watch`` row and the ``get`` detail, with the age of every
figure.

The API reads a stream's delivered seq from the last renewal of its lease (at most a heartbeat
old: ``last_seq``, ``last_seq_at``) and its rate from that and the holder's last progress report
(``msgs_per_s``, ``rate_since``; architecture §6). The counters (received, delivered, malformed,
gaps) exist only in that report, written every few minutes: they are shown with their age and
never as a rate. A field an older API does not send reads ``-``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from streamlease.cli.render import (
    DIM,
    NONE,
    NOTHING_DELIVERED_TEXT,
    PAST_ERROR,
    age_ms,
    cell,
    clip,
    connection_detail,
    connection_text,
    count_text,
    fit_columns,
    lease_text,
    now_ms,
    paint,
    profile_detail,
    redact_url,
    row_colour,
    seconds_text,
    table,
    worker_name,
)

_SUBJECT: Final = re.compile(r"^(?P<who>worker (?P<id>\S+?)(?:'s)?|upstream|sink) (?P<cause>.+)$")
"""An error message that names who failed before what happened (``worker <id> stopped
renewing its session``, ``upstream refused the handshake (HTTP 403)``)."""


def rate_text(rate: Any) -> str:
    """``12.5`` (messages/s) / ``-``."""
    return f"{rate:.1f}" if isinstance(rate, int | float) else NONE


def api_rate(stream: Mapping[str, Any]) -> float | None:
    """The API's messages/s of a stream's current holding; None when it has none."""
    rate = stream.get("msgs_per_s")
    return float(rate) if isinstance(rate, int | float) else None


def age_text(iso: Any, at_ms: int) -> str:
    """``2.1s``: the age of the ISO-8601 time ``iso`` at wall time ``at_ms``; ``-`` without."""
    age = age_ms(iso, at_ms)
    return NONE if age is None else seconds_text(age)


def error_headline(text: str) -> str:
    """An error with what happened first and who failed after it: ``stopped renewing its
    session (worker ba7ad1a8…/…)``, ``refused the handshake (HTTP 403) (upstream)``; other
    texts as they are. A column cut to any width then still starts with the cause."""
    found = _SUBJECT.match(text)
    if found is None:
        return text
    who = found["who"]
    if found["id"] is not None:
        who = f"worker {worker_name(found['id'])}"
    return f"{found['cause']} ({who})"


def last_error_text(stream: Mapping[str, Any]) -> str:
    """The last error, cause first, marked :data:`PAST_ERROR` after it when the stream has been
    healthy since."""
    error = cell(stream.get("last_error"))
    if error == NONE:
        return error
    error = error_headline(error)
    return f"{error} {PAST_ERROR}" if stream.get("last_error_active") is False else error


PROGRESS_KEYS: Final = ("frames_received", "frames_delivered", "frames_malformed", "seq_gaps")


def frames_text(stream: Mapping[str, Any]) -> str:
    """``1204/1200/4/1``: frames received, delivered, malformed and gaps of the current
    holding as of its holder's last report; ``-`` until it reported."""
    if stream.get("frames_received") is None:
        return NONE
    return "/".join(count_text(stream.get(key)) for key in PROGRESS_KEYS)


STREAM_HEADERS: Final = (
    "ID",
    "STATE",
    "CONNECTION",
    "OWNER",
    "LEASE",
    "EPOCH",
    "LAST_SEQ",
    "MSG/S",
    "SEQ_AGE",
    "TAKEOVERS",
    "RCVD/DLVD/BAD/GAPS",
    "COUNTED",
    "LAST_ERROR",
)
"""``SEQ_AGE``: how old ``LAST_SEQ`` (and the rate) is; ``COUNTED``: how old the counters are."""
STREAM_RIGHT: Final = "EPOCH,LAST_SEQ,MSG/S,SEQ_AGE,TAKEOVERS,RCVD/DLVD/BAD/GAPS,COUNTED"
LAST_ERROR_CHARS: Final = 48
LAST_ERROR_MIN_CHARS: Final = 24
"""The fewest characters of ``LAST_ERROR`` a narrow table keeps (other columns go first)."""
STREAM_DROP_FIRST: Final = (
    "TAKEOVERS",
    "EPOCH",
    "LEASE",
    "STATE",
    "COUNTED",
    "RCVD/DLVD/BAD/GAPS",
    "OWNER",
    "SEQ_AGE",
    "LAST_ERROR",
)
"""Columns left out, in this order, when the table does not fit a terminal (``get`` shows a
stream whole): the owner goes before the age of the seq and the last error's cause (kept at
:data:`LAST_ERROR_MIN_CHARS` at least) do."""


def stream_row(
    stream: Mapping[str, Any], at_ms: int | None = None, rate: float | None = None
) -> list[str]:
    """One row of the stream table (:data:`STREAM_HEADERS`) at wall time ``at_ms`` (default:
    now); ``rate``: messages/s to show instead of the API's."""
    at = now_ms() if at_ms is None else at_ms
    return [
        cell(stream.get("id")),
        cell(stream.get("desired_state")),
        connection_text(stream, at),
        worker_name(stream.get("owner")),
        lease_text(stream),
        cell(stream.get("epoch")),
        cell(stream.get("last_seq")),
        rate_text(api_rate(stream) if rate is None else rate),
        age_text(stream.get("last_seq_at"), at),
        cell(stream.get("takeovers")),
        frames_text(stream),
        age_text(stream.get("progress_at"), at)
        if stream.get("frames_received") is not None
        else NONE,
        clip(last_error_text(stream), LAST_ERROR_CHARS),
    ]


def stream_lines(
    streams: Sequence[Mapping[str, Any]],
    at_ms: int,
    *,
    colour: bool = False,
    width: int | None = None,
) -> list[str]:
    """The ``ls`` table; streams in trouble in red when ``colour``; with ``width``, lines fit
    it by leaving out columns (:data:`STREAM_DROP_FIRST`) before ``LAST_ERROR`` is narrowed
    below :data:`LAST_ERROR_MIN_CHARS`."""
    headers, rows = list(STREAM_HEADERS), [stream_row(s, at_ms) for s in streams]
    if width is not None:
        headers, rows = fit_columns(
            headers, rows, width, drop=STREAM_DROP_FIRST, last_min=LAST_ERROR_MIN_CHARS
        )
    lines = table(headers, rows, right=STREAM_RIGHT, width=width)
    painted = zip(lines[1:], streams, strict=True)
    return [lines[0], *(row_colour(line, stream, colour) for line, stream in painted)]


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


def stream_detail(
    stream: Mapping[str, Any], at_ms: int | None = None, *, colour: bool = False
) -> list[str]:
    """``get`` output: one ``label: value`` line per field, the URL redacted, the lease left,
    the connection, the rate and the holder's counters (each with its age as of wall time
    ``at_ms``, default now) added; a connection in trouble in red and a past error dimmed when
    ``colour``."""
    at = now_ms() if at_ms is None else at_ms
    lines = []
    for label, key in DETAIL_FIELDS:
        value = stream.get(key)
        if key == "ws_url" and value:
            text = redact_url(str(value))
        elif key == "last_seq":
            text = delivered_detail(stream, at)
        elif key == "last_error":
            text = last_error_text(stream)
            if text.endswith(PAST_ERROR):
                text = paint(text, DIM, colour)
        else:
            text = cell(value)
        lines.append(f"{label + ':':<15}{text}")
        if key == "owner":
            lines.append(f"{'lease left:':<15}{lease_text(stream)}")
            lines.append(f"{'connection:':<15}{connection_detail(stream, at, colour)}")
        if key == "last_seq":
            lines.append(f"{'rate:':<15}{rate_detail(stream, at)}")
            lines.append(f"{'progress:':<15}{progress_detail(stream, at)}")
            lines.append(f"{'last message:':<15}{last_message_detail(stream, at)}")
    lines += profile_detail(stream)
    return lines


def delivered_detail(stream: Mapping[str, Any], at_ms: int) -> str:
    """``1234 (read 2.1s ago)``: the delivered seq and the age of the renewal (or report) that
    carried it; :data:`NOTHING_DELIVERED_TEXT` when none was delivered."""
    seq = stream.get("last_seq")
    if seq is None:
        return NOTHING_DELIVERED_TEXT
    age = age_ms(stream.get("last_seq_at"), at_ms)
    return str(seq) if age is None else f"{seq} (read {seconds_text(age)} ago)"


def rate_detail(stream: Mapping[str, Any], at_ms: int) -> str:
    """``19.8 msg/s from 4m10s ago to 2.1s ago``: the rate and the time it averages over."""
    rate = api_rate(stream)
    if rate is None:
        return NONE
    since = age_ms(stream.get("rate_since"), at_ms)
    until = age_ms(stream.get("last_seq_at"), at_ms)
    if since is None or until is None:
        return f"{rate:.1f} msg/s"
    return f"{rate:.1f} msg/s from {seconds_text(since)} ago to {seconds_text(until)} ago"


def progress_detail(stream: Mapping[str, Any], at_ms: int) -> str:
    """``received 1204, delivered 1200, malformed 4, gaps 1 (reported 2.0s ago)``: the
    holder's counters, written every few minutes (not live)."""
    if stream.get("frames_received") is None:
        return NONE
    labels = ("received", "delivered", "malformed", "gaps")
    text = ", ".join(
        f"{label} {cell(stream.get(key))}" for label, key in zip(labels, PROGRESS_KEYS, strict=True)
    )
    if stream.get("frames_control"):
        text += f", control {cell(stream.get('frames_control'))}"
    age = age_ms(stream.get("progress_at"), at_ms)
    return text if age is None else f"{text} (reported {seconds_text(age)} ago)"


def last_message_detail(stream: Mapping[str, Any], at_ms: int) -> str:
    """``2026-…Z (reported 12s ago)``: when the last delivered message was received, as of the
    holder's last report (the live figure is ``last seq``)."""
    at = stream.get("last_message_at")
    age = age_ms(stream.get("progress_at"), at_ms)
    if not at:
        return NONE
    return str(at) if age is None else f"{at} (as of the report {seconds_text(age)} ago)"
