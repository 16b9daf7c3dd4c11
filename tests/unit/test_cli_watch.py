"""``streamlease watch``: frames, message rates from last_seq deltas, one-frame mode."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

from streamlease.cli import ApiClient, main
from streamlease.cli.transport import Response, TransportError
from streamlease.cli.watch import CLEAR, RateTracker, Snapshot, render_frame, watch

STREAMS = [
    {
        "id": "b",
        "desired_state": "STARTED",
        "owner": "t1/11-aaaa",
        "lease_remaining_ms": 15_000,
        "epoch": 2,
        "last_seq": 40,
        "takeovers": 1,
    },
    {
        "id": "a",
        "desired_state": "STARTED",
        "owner": None,
        "lease_remaining_ms": 0,
        "epoch": 1,
        "last_seq": 7,
        "takeovers": 0,
    },
    {
        "id": "c",
        "desired_state": "STOPPED",
        "owner": None,
        "lease_remaining_ms": 0,
        "epoch": 1,
        "last_seq": 3,
        "takeovers": 0,
    },
]
WORKERS = [
    {
        "id": "t1/11-aaaa",
        "state": "RUNNING",
        "stream_count": 1,
        "capacity": 100,
        "pid": 11,
        "host": "h",
        "heartbeat_age_ms": 800,
        "version": "1",
        "task_arn": "",
        "started_at": None,
    }
]


class FakeTransport:
    """Answers GET /streams and GET /workers from fixed data; can be made to fail."""

    def __init__(self, streams: list[dict[str, Any]], fail: bool = False) -> None:
        self.streams = streams
        self.fail = fail
        self.calls = 0

    def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, t: float
    ) -> Response:
        self.calls += 1
        if self.fail:
            raise TransportError("connection refused by 127.0.0.1:1")
        if "/workers" in url:
            data: dict[str, Any] = {"workers": WORKERS}
        else:
            data = {"streams": self.streams, "next_token": None}
        return Response(200, {}, json.dumps(data).encode())


def test_rate_needs_two_samples_a_second_apart() -> None:
    """No rate is shown until last_seq has been seen twice at least one second apart."""
    rates = RateTracker()
    rates.observe("s", 0.0, 10)
    assert rates.rate("s") is None
    rates.observe("s", 0.5, 12)
    assert rates.rate("s") is None
    rates.observe("s", 2.0, 30)
    assert rates.rate("s") == 10.0


def test_rate_is_averaged_over_a_sliding_window() -> None:
    """Old samples leave the window, so the rate follows the recent checkpoints."""
    rates = RateTracker(window_seconds=10)
    for second in range(30):
        rates.observe("s", float(second), second * (5 if second < 15 else 20))
    assert rates.rate("s") == 20.0


def test_a_lower_last_seq_restarts_the_rate() -> None:
    """A stream deleted and created again does not show a negative rate."""
    rates = RateTracker()
    rates.observe("s", 0.0, 100)
    rates.observe("s", 2.0, 120)
    rates.observe("s", 3.0, 5)
    assert rates.rate("s") is None


def test_frame_counts_wanted_owned_and_orphaned_streams() -> None:
    """The headline says how many streams are wanted, owned and orphaned, and the fleet size."""
    lines = render_frame(Snapshot(STREAMS, WORKERS), RateTracker(), api_url="http://x")
    assert "wanted 2  owned 1  orphaned 1 (0 lease expired)  workers 1" in lines[1]
    text = "\n".join(lines)
    assert "t1/11-aaaa" in text and "15s" in text


def test_frame_fits_the_terminal() -> None:
    """Rows beyond the terminal height are summarised, lines are cut to its width."""
    many = [{**STREAMS[0], "id": f"s{i:03d}"} for i in range(200)]
    lines = render_frame(
        Snapshot(many, WORKERS), RateTracker(), api_url="http://x", width=50, height=30
    )
    assert len(lines) <= 31
    assert all(len(line) <= 50 for line in lines)
    assert any("more streams" in line for line in lines)


def test_once_prints_one_plain_frame() -> None:
    """``watch --once`` polls once and prints the frame without screen control codes."""
    transport = FakeTransport(STREAMS)
    out = io.StringIO()
    code = main(["--api", "http://127.0.0.1:9", "watch", "--once"], transport=transport, stdout=out)
    assert code == 0
    assert CLEAR not in out.getvalue() and "\x1b" not in out.getvalue()
    assert transport.calls == 2
    assert "MSG/S" in out.getvalue()


def test_live_mode_redraws_with_ansi_and_computes_rates() -> None:
    """Each refresh clears the screen; the second frame shows msgs/s from the last_seq delta."""
    transport = FakeTransport([dict(s) for s in STREAMS])
    client = ApiClient("http://127.0.0.1:9", transport=transport)
    out = io.StringIO()
    frames = 0

    def sleep(_: float) -> None:
        nonlocal frames
        frames += 1
        transport.streams[0]["last_seq"] += 50
        if frames == 3:
            raise KeyboardInterrupt

    ticks = iter(range(100))
    code = watch(
        client, out, sleep=sleep, terminal_size=lambda: (120, 40), clock=lambda: next(ticks)
    )
    assert code == 0
    text = out.getvalue()
    assert text.count(CLEAR) == 3
    assert text.endswith("\x1b[?25h")
    last_frame = text.split(CLEAR)[-1]
    assert "msgs/s 25.0" in last_frame


def test_once_with_an_unreachable_api_fails() -> None:
    """One frame that could not be read is exit code 1 and says why."""
    out = io.StringIO()
    code = main(
        ["--api", "http://127.0.0.1:9", "watch", "--once"],
        transport=FakeTransport([], fail=True),
        stdout=out,
    )
    assert code == 1
    assert "API error: connection refused" in out.getvalue()


def test_json_frames_carry_rates() -> None:
    """``watch --once --json`` prints the frame as data, with msgs_per_s per stream."""
    out = io.StringIO()
    code = main(
        ["--api", "http://127.0.0.1:9", "watch", "--once", "--json"],
        transport=FakeTransport(STREAMS),
        stdout=out,
    )
    assert code == 0
    frame = json.loads(out.getvalue())
    assert {s["id"] for s in frame["streams"]} == {"a", "b", "c"}
    assert all("msgs_per_s" in s for s in frame["streams"])
    assert frame["workers"] == WORKERS
