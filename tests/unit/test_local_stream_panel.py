"""The local dashboard's per-stream panel: the streams in trouble with their cause first and
since when, the busiest by rate, each figure with its age."""

from __future__ import annotations

import datetime as dt
from typing import Any

from local.stream_panel import ORPHANED, PANEL_ROWS, stream_panel

NOW_MS = 1_796_000_000_000


def iso(at_ms: int) -> str:
    return dt.datetime.fromtimestamp(at_ms / 1000, tz=dt.UTC).isoformat().replace("+00:00", "Z")


def stream(stream_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": stream_id,
        "desired_state": "STARTED",
        "owner": "host/1-ab12",
        "lease_state": "held",
        "connection_state": "connected",
        **fields,
    }


def test_streams_in_trouble_show_state_cause_first_and_since() -> None:
    rejected = stream(
        "r1",
        connection_state="rejected",
        connection_since=iso(NOW_MS - 90_000),
        last_error="upstream refused the handshake (HTTP 403)",
    )
    orphan = stream("o1", owner=None, lease_state="free", updated_at=iso(NOW_MS - 5_000))
    panel = stream_panel([rejected, orphan, stream("ok")], NOW_MS)
    assert panel["trouble"] == [
        {
            "id": "r1",
            "state": "rejected",
            "cause": "refused the handshake (HTTP 403) (upstream)",
            "since": iso(NOW_MS - 90_000),
            "since_age_ms": 90_000,
        },
        {
            "id": "o1",
            "state": ORPHANED,
            "cause": None,
            "since": iso(NOW_MS - 5_000),
            "since_age_ms": 5_000,
        },
    ]


def test_the_busiest_streams_come_first_with_the_age_of_their_figures() -> None:
    streams = [
        stream(f"s{n}", msgs_per_s=float(n), last_seq=n * 100, last_seq_at=iso(NOW_MS - 2_000))
        for n in range(PANEL_ROWS + 3)
    ]
    streams.append(stream("stopped", desired_state="STOPPED", msgs_per_s=999.0))
    panel = stream_panel(streams, NOW_MS)
    busiest = panel["busiest"]
    assert [row["id"] for row in busiest] == [f"s{n}" for n in range(PANEL_ROWS + 2, 2, -1)]
    assert (busiest[0]["msgs_per_s"], busiest[0]["last_seq"]) == (12.0, 1200)
    assert busiest[0]["last_seq_age_ms"] == 2_000
    assert panel["rated_count"] == PANEL_ROWS + 3
