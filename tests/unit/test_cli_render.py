"""How the CLI renders a stream's connection state and last error, and names workers."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from streamlease.cli.render import (
    NONE,
    NOTHING_DELIVERED_TEXT,
    connection_text,
    count_text,
    worker_name,
    worker_row,
)
from streamlease.cli.stream_text import (
    STREAM_HEADERS,
    last_error_text,
    stream_detail,
    stream_lines,
    stream_row,
)

NOW_MS = 1_796_000_000_000
SINCE_MS = NOW_MS - 20_000
SINCE = dt.datetime.fromtimestamp(SINCE_MS / 1000, tz=dt.UTC).isoformat().replace("+00:00", "Z")


def iso(at_ms: int) -> str:
    """``at_ms`` as the API writes times."""
    return dt.datetime.fromtimestamp(at_ms / 1000, tz=dt.UTC).isoformat().replace("+00:00", "Z")


STREAM: dict[str, Any] = {
    "id": "s1",
    "ws_url": "wss://feed.example.com/s1",
    "desired_state": "STARTED",
    "owner": "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12",
    "lease_state": "held",
    "lease_remaining_ms": 12_000,
    "epoch": 3,
    "last_seq": 1200,
    "generation": 1,
    "takeovers": 0,
    "last_error": None,
}


def test_connection_state_shows_with_its_age() -> None:
    """``connected 20s``: the state and how long it has lasted."""
    stream = {**STREAM, "connection_state": "connected", "connection_since": SINCE}
    assert connection_text(stream, NOW_MS) == "connected 20s"


def test_a_rejected_stream_stands_out() -> None:
    """A rejected stream is owned but not flowing: its state is in capitals."""
    stream = {**STREAM, "connection_state": "rejected", "connection_since": SINCE}
    assert stream_row(stream, NOW_MS)[2] == "REJECTED 20s"


@pytest.mark.parametrize("state", ["retrying", "stalled", "malformed", "sink_failing"])
def test_every_trouble_state_stands_out(state: str) -> None:
    """Each state in which nothing is delivered is in capitals, as rejected is."""
    stream = {**STREAM, "connection_state": state, "connection_since": SINCE}
    assert stream_row(stream, NOW_MS)[2] == f"{state.upper()} 20s"


def test_a_row_shows_the_holders_counters_with_their_age() -> None:
    """Received/delivered/malformed/gaps in one cell, and how old that report is (COUNTED)."""
    stream = {
        **STREAM,
        "frames_received": 1204,
        "frames_delivered": 123_456,
        "frames_malformed": 4,
        "seq_gaps": 0,
        "progress_at": SINCE,
    }
    row = dict(zip(STREAM_HEADERS, stream_row(stream, NOW_MS), strict=True))
    assert (row["RCVD/DLVD/BAD/GAPS"], row["COUNTED"]) == ("1204/123k/4/0", "20s")
    unreported = dict(zip(STREAM_HEADERS, stream_row(STREAM, NOW_MS), strict=True))
    assert (unreported["RCVD/DLVD/BAD/GAPS"], unreported["COUNTED"]) == ("-", "-")


def test_a_row_shows_the_live_seq_its_age_and_the_rate() -> None:
    """LAST_SEQ is the renewal's reading, SEQ_AGE how old it is, MSG/S the API's rate."""
    read_at = iso(NOW_MS - 3_000)
    stream = {**STREAM, "last_seq": 4321, "last_seq_at": read_at, "msgs_per_s": 19.84}
    row = dict(zip(STREAM_HEADERS, stream_row(stream, NOW_MS), strict=True))
    assert (row["LAST_SEQ"], row["SEQ_AGE"], row["MSG/S"]) == ("4321", "3.0s", "19.8")
    older_api = dict(zip(STREAM_HEADERS, stream_row(STREAM, NOW_MS), strict=True))
    assert (older_api["SEQ_AGE"], older_api["MSG/S"]) == ("-", "-")


def test_get_says_how_old_the_seq_the_rate_and_the_counters_are() -> None:
    """``get`` gives the seq with its age, the rate with its window, the counters with their
    report's age (never as a rate)."""
    stream = {
        **STREAM,
        "owner": "host/1-ab12",
        "last_seq": 4321,
        "last_seq_at": iso(NOW_MS - 2_000),
        "msgs_per_s": 20.0,
        "rate_since": iso(NOW_MS - 62_000),
        "frames_received": 30,
        "frames_delivered": 30,
        "frames_malformed": 0,
        "seq_gaps": 27,
        "progress_at": iso(NOW_MS - 62_000),
    }
    lines = stream_detail(stream, NOW_MS)
    assert f"{'last seq:':<15}4321 (read 2.0s ago)" in lines
    assert f"{'rate:':<15}20.0 msg/s from 1m02s ago to 2.0s ago" in lines
    assert (
        f"{'progress:':<15}received 30, delivered 30, malformed 0, gaps 27 (reported 1m02s ago)"
        in lines
    )


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0"),
        (9999, "9999"),
        (12_345, "12.3k"),
        (99_999, "99.9k"),
        (123_456, "123k"),
        (4_199_999, "4.1M"),
    ],
)
def test_counts_fit_a_narrow_cell(count: int, text: str) -> None:
    """Large counts are shortened to at most five characters."""
    assert count_text(count) == text


def test_an_older_api_without_connection_state_shows_a_dash() -> None:
    """Fields an older API does not send are ``-``, as any missing value."""
    assert stream_row(STREAM, NOW_MS)[2] == "-"
    assert "connection:    -" in stream_detail(STREAM, NOW_MS)


def test_a_stream_that_delivered_nothing_shows_no_last_seq() -> None:
    """Not a misleading 0 or -1: ``ls`` shows a dash, ``get`` says so in words; seq 0 is 0."""
    nothing = {**STREAM, "last_seq": None}
    assert stream_row(nothing, NOW_MS)[STREAM_HEADERS.index("LAST_SEQ")] == NONE
    assert f"{'last seq:':<15}{NOTHING_DELIVERED_TEXT}" in stream_detail(nothing, NOW_MS)
    assert stream_row({**STREAM, "last_seq": 0}, NOW_MS)[STREAM_HEADERS.index("LAST_SEQ")] == "0"


def test_a_past_error_is_marked_past_after_its_cause() -> None:
    """``last_error_active: false``: the error is from before the stream became healthy."""
    failing = {**STREAM, "last_error": "timed out opening"}
    assert last_error_text({**failing, "last_error_active": True}) == "timed out opening"
    assert last_error_text({**failing, "last_error_active": False}) == ("timed out opening (past)")
    assert last_error_text(failing) == "timed out opening"  # an older API: as it is


@pytest.mark.parametrize(
    ("error", "headline"),
    [
        (
            "worker 0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12 stopped renewing its session",
            "stopped renewing its session (worker 0f1e2d3c…/4242-ab12)",
        ),
        (
            "worker 0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12's session is gone",
            "session is gone (worker 0f1e2d3c…/4242-ab12)",
        ),
        (
            "upstream refused the handshake (HTTP 403)",
            "refused the handshake (HTTP 403) (upstream)",
        ),
    ],
)
def test_last_error_starts_with_the_cause(error: str, headline: str) -> None:
    """Who failed goes after what happened, so that any cut keeps the cause."""
    assert last_error_text({**STREAM, "last_error": error, "last_error_active": False}) == (
        f"{headline} (past)"
    )


@pytest.mark.parametrize("width", [80, 100, 120, 200, None])
def test_ls_shows_the_cause_first_at_every_width(width: int | None) -> None:
    """The ``ls`` table cut to a terminal's width (None: a pipe, nothing cut) still starts its
    LAST_ERROR with the cause."""
    stream = {
        **STREAM,
        "owner": "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12",
        "last_error": "worker 0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12 stopped renewing its "
        "session",
        "last_error_active": False,
    }
    header, row = stream_lines([stream], NOW_MS, width=width)
    assert len(row) <= (width or len(row))
    assert row[header.index("LAST_ERROR") :].startswith("stopped renewing")
    assert {"LAST_SEQ", "MSG/S", "SEQ_AGE"} <= set(header.split())  # the owner went first


def test_a_worker_has_one_short_name_in_every_table() -> None:
    """Streams' owners and the worker table name a worker alike: task id cut, pid and session."""
    worker_id = "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12"
    assert worker_name(worker_id) == "0f1e2d3c…/4242-ab12"
    assert (
        stream_row(STREAM, NOW_MS)[3] == worker_row({"id": worker_id})[0] == worker_name(worker_id)
    )
    assert worker_name("host-1/77-ffff") == "host-1/77-ffff"
    assert worker_name(None) == "-"
