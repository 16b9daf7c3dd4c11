"""``streamlease watch``: a live terminal view of streams and workers, redrawn every second.

The local counterpart of the CloudWatch dashboard. Messages per second come from ``last_seq``
deltas; ``last_seq`` is a checkpoint written once per heartbeat, so rates are averaged over a
window of several heartbeats rather than between two frames.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from streamlease.cli.client import ApiClient, ApiError
from streamlease.cli.render import (
    NONE,
    STREAM_HEADERS,
    WORKER_HEADERS,
    stream_row,
    table,
    worker_row,
)
from streamlease.cli.transport import TransportError

CLEAR: Final = "\x1b[H\x1b[2J"
HIDE_CURSOR: Final = "\x1b[?25l"
SHOW_CURSOR: Final = "\x1b[?25h"
RATE_WINDOW_SECONDS: Final = 15.0


@dataclass
class RateTracker:
    """Messages per second per stream from successive ``last_seq`` samples (monotonic seconds)."""

    window_seconds: float = RATE_WINDOW_SECONDS
    _samples: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)

    def observe(self, stream_id: str, now: float, last_seq: int) -> None:
        """Record ``last_seq`` at ``now``; a lower ``last_seq`` (recreated stream) starts over."""
        samples = self._samples.setdefault(stream_id, deque())
        if samples and last_seq < samples[-1][1]:
            samples.clear()
        samples.append((now, last_seq))
        while len(samples) > 2 and now - samples[1][0] >= self.window_seconds:
            samples.popleft()

    def rate(self, stream_id: str) -> float | None:
        """Messages/s over the window, or ``None`` before two samples at least 1 s apart."""
        samples = self._samples.get(stream_id)
        if not samples or len(samples) < 2:
            return None
        (t0, s0), (t1, s1) = samples[0], samples[-1]
        if t1 - t0 < 1.0:
            return None
        return (s1 - s0) / (t1 - t0)

    def forget_except(self, stream_ids: set[str]) -> None:
        """Drop the history of streams that are gone."""
        for stream_id in set(self._samples) - stream_ids:
            del self._samples[stream_id]


@dataclass(frozen=True)
class Snapshot:
    """One poll of the API: streams, workers, or the error that prevented it."""

    streams: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    error: str | None = None


def take_snapshot(client: ApiClient) -> Snapshot:
    """Read every stream and worker; API and connection failures become ``error``."""
    try:
        streams = sorted(client.list_streams(), key=lambda s: str(s.get("id")))
        workers = sorted(client.list_workers(), key=lambda w: str(w.get("id")))
    except (ApiError, TransportError) as exc:
        return Snapshot([], [], error=str(exc))
    return Snapshot(streams, workers)


def rate_text(rate: float | None) -> str:
    """``12.5`` / ``-``."""
    return NONE if rate is None else f"{rate:.1f}"


def render_frame(
    snapshot: Snapshot,
    rates: RateTracker,
    *,
    api_url: str,
    width: int = 120,
    height: int = 40,
    now: float | None = None,
) -> list[str]:
    """The lines of one frame, cut to ``width`` columns and about ``height`` rows."""
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    lines = [f"streamlease watch  {clock}  {api_url}"]
    if snapshot.error:
        lines.append(f"API error: {snapshot.error} (retrying)")
        return [line[:width] for line in lines]
    streams, workers = snapshot.streams, snapshot.workers
    started = [s for s in streams if s.get("desired_state") == "STARTED"]
    owned = [s for s in started if s.get("owner") and (s.get("lease_remaining_ms") or 0) > 0]
    expired = [s for s in started if s.get("owner") and s not in owned]
    known = [r for r in (rates.rate(str(s.get("id"))) for s in started) if r is not None]
    total = f"{sum(known):.1f}" if known else NONE
    lines.append(
        f"streams {len(streams)}  wanted {len(started)}  owned {len(owned)}  "
        f"orphaned {len(started) - len(owned)} ({len(expired)} lease expired)  "
        f"workers {len(workers)}  msgs/s {total}"
    )
    lines.append("")
    worker_lines = table(WORKER_HEADERS, [worker_row(w) for w in workers], right="STREAMS,PID")
    stream_budget = max(height - len(lines) - len(worker_lines) - 3, 3)
    headers = (*STREAM_HEADERS[:6], "MSG/S", *STREAM_HEADERS[6:])
    rows = []
    for stream in streams:
        row = stream_row(stream)
        rows.append([*row[:6], rate_text(rates.rate(str(stream.get("id")))), *row[6:]])
    shown = rows[:stream_budget]
    lines += table(headers, shown, right="EPOCH,LAST_SEQ,MSG/S,TAKEOVERS")
    if len(rows) > len(shown):
        lines.append(f"… {len(rows) - len(shown)} more streams (make the terminal taller)")
    lines.append("")
    lines += worker_lines if workers else ["no live workers"]
    return [line[:width] for line in lines]


def frame_json(snapshot: Snapshot, rates: RateTracker) -> dict[str, Any]:
    """The frame as data (``--json``): streams with ``msgs_per_s``, workers, error."""
    streams = [{**s, "msgs_per_s": rates.rate(str(s.get("id")))} for s in snapshot.streams]
    return {"streams": streams, "workers": snapshot.workers, "error": snapshot.error}


def watch(
    client: ApiClient,
    out: TextIO,
    *,
    interval_seconds: float = 1.0,
    once: bool = False,
    as_json: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    terminal_size: Callable[[], Sequence[int]] = shutil.get_terminal_size,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Poll and redraw until interrupted (Ctrl-C). Returns the exit code.

    ``once`` prints a single frame without screen control codes and returns 1 if the API could
    not be read. ``sleep``, ``terminal_size`` and ``clock`` (monotonic seconds) are seams for
    tests. The redraw is a plain ANSI clear-screen, which every terminal and tmux handle.
    """
    rates = RateTracker()
    drawing = not once and not as_json
    if drawing:
        out.write(HIDE_CURSOR)
    try:
        while True:
            started = clock()
            snapshot = take_snapshot(client)
            for stream in snapshot.streams:
                rates.observe(str(stream.get("id")), started, int(stream.get("last_seq") or 0))
            rates.forget_except({str(s.get("id")) for s in snapshot.streams})
            if as_json:
                out.write(json.dumps(frame_json(snapshot, rates), separators=(",", ":")) + "\n")
            else:
                # One frame for a pipe or a test is printed whole; a live view fits the screen.
                columns, rows = terminal_size() if drawing else (1000, 100_000)
                lines = render_frame(
                    snapshot, rates, api_url=client.base_url, width=columns, height=rows
                )
                out.write((CLEAR if drawing else "") + "\n".join(lines) + "\n")
            out.flush()
            if once:
                return 1 if snapshot.error else 0
            sleep(max(interval_seconds - (clock() - started), 0.05))
    except KeyboardInterrupt:
        return 0
    finally:
        if drawing:
            out.write(SHOW_CURSOR)
            out.flush()
