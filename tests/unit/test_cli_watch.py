"""``streamlease watch``: frames, message rates from last_seq deltas, one-frame mode."""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from streamlease.cli import ApiClient, main
from streamlease.cli.transport import Response, TransportError
from streamlease.cli.watch import (
    CLEAR,
    RateTracker,
    Snapshot,
    frame_json,
    more_text,
    render_frame,
    watch,
)

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
    assert "wanted 2  owned 1  trouble 0  orphaned 1 (0 lease expired)  workers 1" in lines[1]
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


def test_stopped_streams_show_no_rate() -> None:
    """A stopped stream's last_seq no longer moves: no msgs/s for it, nor in the total."""
    rates = RateTracker()
    for second, seq in ((0.0, 0), (2.0, 20)):
        for stream in STREAMS:
            rates.observe(str(stream["id"]), second, seq)
    lines = render_frame(Snapshot(STREAMS, WORKERS), rates, api_url="http://x")
    row_c = next(line for line in lines if line.startswith("c "))
    assert " 10.0 " not in row_c and "STOPPED" in row_c
    assert "msgs/s 20.0" in lines[1]  # a and b, not c
    frame = frame_json(Snapshot(STREAMS, WORKERS), rates)
    assert [s["msgs_per_s"] for s in frame["streams"]] == [10.0, 10.0, None]


def test_left_over_rows_are_counted_in_good_english() -> None:
    """Left over rows: "1 more stream", "2 more streams"; one row left over is simply shown."""
    assert more_text(1, "stream", "h") == "… 1 more stream (h)"
    assert more_text(2, "worker", "h") == "… 2 more workers (h)"

    def frame(count: int) -> list[str]:
        streams = [{**STREAMS[0], "id": f"s{i:03d}"} for i in range(count)]
        snapshot = Snapshot(streams, WORKERS)
        return render_frame(snapshot, RateTracker(), api_url="http://x", width=200, height=30)

    fits = sum(1 for line in frame(200) if line.startswith("s0"))
    assert sum(1 for line in frame(fits + 1) if line.startswith("s0")) == fits + 1
    assert any(line.startswith("… 2 more streams (") for line in frame(fits + 2))


def test_a_live_frame_leaves_the_last_row_free() -> None:
    """A frame is at most height - 1 lines: the newline after the last must not scroll it off,
    however many streams and workers there are."""
    many = [{**STREAMS[0], "id": f"s{i:03d}"} for i in range(200)]
    workers = [{**WORKERS[0], "id": f"t{i}/1-aaaa"} for i in range(50)]
    for height in (12, 24, 40):
        lines = render_frame(
            Snapshot(many, workers), RateTracker(), api_url="http://x", width=80, height=height
        )
        assert len(lines) <= height - 1, (height, len(lines))
        assert any("more workers" in line for line in lines)


@pytest.mark.parametrize("width", [80, 120])
def test_rows_fit_the_width_keeping_the_cause_of_the_last_error(width: int) -> None:
    """On a narrow terminal LAST_ERROR is cut (with an ellipsis) only after the least needed
    columns went, and what is left of it starts with the cause."""
    failing = [{**STREAMS[0], "last_error": "upstream refused the handshake (HTTP 403) " * 3}]
    lines = render_frame(
        Snapshot(failing, WORKERS), RateTracker(), api_url="http://x", width=width, height=40
    )
    header = next(line for line in lines if line.startswith("ID "))
    row = next(line for line in lines if line.startswith("b "))
    assert len(row) <= width and row.endswith("…")
    error = row[header.index("LAST_ERROR") :]
    assert error.startswith("refused the handshake") and len(error) >= 24


def test_once_on_a_terminal_fits_its_width() -> None:
    """``watch --once`` in a terminal cuts lines to its width (no wrapped frame)."""
    failing = [{**STREAMS[0], "last_error": "x" * 300}]
    out = io.StringIO()
    client = ApiClient("http://127.0.0.1:9", transport=FakeTransport(failing))
    code = watch(client, out, once=True, terminal=True, terminal_size=lambda: (90, 30))
    assert code == 0
    assert max(len(line) for line in out.getvalue().splitlines()) <= 90


def test_once_does_not_promise_a_retry() -> None:
    """One frame that failed says what failed, not "(retrying)"; a live view does retry."""
    snapshot = Snapshot([], [], error="connection refused by 127.0.0.1:9")
    once = render_frame(snapshot, RateTracker(), api_url="http://x", retrying=False)
    live = render_frame(snapshot, RateTracker(), api_url="http://x")
    assert once[-1] == "API error: connection refused by 127.0.0.1:9"
    assert live[-1].endswith("(retrying)")


def test_streams_in_trouble_are_counted_and_painted() -> None:
    """Owned but delivering nothing: the headline counts every trouble state, their rows are
    red and their state is in capitals."""
    troubled = [
        {**STREAMS[0], "id": f"t-{state}", "connection_state": state}
        for state in ("rejected", "stalled", "malformed", "sink_failing", "retrying")
    ]
    snapshot = Snapshot([*STREAMS, *troubled], WORKERS)
    lines = render_frame(snapshot, RateTracker(), api_url="http://x", colour=True)
    assert "owned 6  \x1b[1;31mtrouble 5 (owned, not delivering)\x1b[0m" in lines[1]
    for state in ("REJECTED", "STALLED", "MALFORMED", "SINK_FAILING", "RETRYING"):
        row = next(line for line in lines if state in line)
        assert row.startswith("\x1b[1;31mt-"), state
    plain = render_frame(snapshot, RateTracker(), api_url="http://x")
    assert "\x1b" not in "\n".join(plain)


def test_streams_in_trouble_come_first() -> None:
    """Streams in trouble, then orphaned streams lead the table, so a cut list still shows
    them."""
    stalled = {**STREAMS[0], "id": "z", "connection_state": "stalled"}
    malformed = {**STREAMS[0], "id": "y", "connection_state": "malformed"}
    snapshot = Snapshot([*STREAMS, stalled, malformed], WORKERS)
    lines = render_frame(snapshot, RateTracker(), api_url="x")
    ids = [line.split()[0] for line in lines[4:9]]
    assert ids == ["z", "y", "a", "b", "c"]


def test_a_last_row_is_shown_rather_than_announced() -> None:
    """When one row is left over it takes the place of its "… 1 more" line."""
    workers = [{**WORKERS[0], "id": f"t{i}/1-aaaa"} for i in range(3)]
    lines = render_frame(
        Snapshot(STREAMS, workers), RateTracker(), api_url="x", width=120, height=16
    )
    assert sum(line.startswith("t") for line in lines) == 3
    assert not any("more worker" in line for line in lines)


OWNER = "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12"
BUSY = {
    "id": "meeting:2026-11-30.7",
    "desired_state": "STARTED",
    "owner": OWNER,
    "lease_state": "held",
    "lease_remaining_ms": 15_000,
    "connection_state": "retrying",
    "connection_since": "2026-11-30T10:00:00+00:00",
    "epoch": 12,
    "last_seq": 1_234_567,
    "takeovers": 3,
    "last_error": "upstream closed the connection (1011 internal error)",
}


def test_at_80_columns_columns_give_way_not_values() -> None:
    """An 80-column terminal: every line fits, the seq and the rate are whole, the last error
    starts with its cause, and the columns left out are the least needed ones (the owner
    before the cause; the worker table names it)."""
    rates = RateTracker()
    rates.observe(BUSY["id"], 0.0, 1_234_000)
    rates.observe(BUSY["id"], 5.0, 1_234_567)
    workers = [{**WORKERS[0], "id": OWNER, "host": "ip-10-0-12-34.ec2.internal"}]
    lines = render_frame(
        Snapshot([BUSY], workers), rates, api_url="http://127.0.0.1:8080", width=80
    )
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if line.startswith("ID "))
    row = next(line for line in lines if line.startswith("meeting:"))
    assert "LAST_SEQ" in header and "MSG/S" in header and "TAKEOVERS" not in header
    assert "1234567" in row and "113.4" in row
    assert row[header.index("LAST_ERROR") :].startswith("closed the connection (1")
    assert "msgs/s 113.4" in "\n".join(lines[:3])  # the headline wraps instead of being cut


def test_a_wide_terminal_keeps_every_column() -> None:
    """With room enough nothing is left out."""
    lines = render_frame(Snapshot([BUSY], WORKERS), RateTracker(), api_url="x", width=200)
    header = next(line for line in lines if line.startswith("ID "))
    for name in ("STATE", "LEASE", "EPOCH", "TAKEOVERS", "LAST_ERROR"):
        assert name in header


class RenewingTransport(FakeTransport):
    """A held stream whose owner renews every 5 s (at ``clock()`` = 0, 5, 10, ...), each
    renewal carrying a checkpoint 50 messages further."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__([])
        self.clock = clock
        self.polls = 0

    def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, t: float
    ) -> Response:
        renewals, since = divmod(self.clock(), 5.0)
        if "/workers" in url:
            workers = [{**WORKERS[0], "id": OWNER, "heartbeat_age_ms": int(since * 1000)}]
            return Response(200, {}, json.dumps({"workers": workers}).encode())
        self.polls += 1
        self.streams = [{**BUSY, "last_seq": 1000 + 50 * int(renewals)}]
        return super().send(method, url, headers, body, t)


def test_once_shows_rates_from_two_checkpoints() -> None:
    """``watch --once`` polls until it has seen a held stream's checkpoint move, then prints
    the rate between the two renewals: 50 messages in 5 s."""
    now = 2.0

    def sleep(seconds: float) -> None:
        nonlocal now
        now += seconds

    transport = RenewingTransport(lambda: now)
    client = ApiClient("http://127.0.0.1:9", transport=transport)
    out = io.StringIO()
    code = watch(client, out, once=True, sleep=sleep, clock=lambda: now)
    assert code == 0
    assert "msgs/s 10.0" in out.getvalue()
    assert CLEAR not in out.getvalue()
    assert transport.polls == 4  # at 2, 3, 4 and 5 s: the checkpoints of 0 and 5 s


def test_once_takes_the_apis_rate_from_one_poll() -> None:
    """An API that reads the rate from the holder's report and its last renewal answers
    ``watch --once`` at once: one poll, the stream's rate and the seq's age in the frame."""
    read_at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2)
    live = {
        **STREAMS[0],
        "lease_state": "held",
        "msgs_per_s": 19.6,
        "last_seq_at": read_at.isoformat().replace("+00:00", "Z"),
    }
    transport = FakeTransport([live])
    client = ApiClient("http://127.0.0.1:9", transport=cast(Any, transport))
    out = io.StringIO()
    assert watch(client, out, once=True, sleep=lambda _: None) == 0
    assert transport.calls == 2  # one poll: the streams and the workers
    header, row = next(
        (lines[i], lines[i + 1])
        for lines in [out.getvalue().splitlines()]
        for i, line in enumerate(lines)
        if line.startswith("ID ")
    )
    assert row[header.index("MSG/S") :].split()[0] == "19.6"
    assert row[header.index("SEQ_AGE") :].split()[0].endswith("s")
