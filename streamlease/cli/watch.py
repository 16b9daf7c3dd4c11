"""``streamlease watch``: a live terminal view of streams and workers, redrawn every second.

The terminal counterpart of the dashboards. Messages per second come from ``last_seq``
deltas; ``last_seq`` is a checkpoint the owner writes once per heartbeat, so each sample is
placed at the time of that heartbeat (the owner's heartbeat age says when) rather than at the
time of the poll, and rates are averaged over a window of several heartbeats — but only where
the API gives none: its own (``msgs_per_s``, between the holder's last progress report and its
last renewal, both timed by the holder) is the better figure, so ``--once`` needs one poll of
a current API. From an API without the field, and for a stream it has no rate for yet,
``--once`` polls until it has seen two checkpoints of every held stream (at most
:data:`ONCE_MAX_SECONDS`).

A frame fits the terminal's width by leaving out the least needed columns (:data:`DROP_FIRST`)
and wrapping the headline, not by cutting values.
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
    RED,
    WORKER_HEADERS,
    fit_columns,
    pack,
    paint,
    row_colour,
    table,
    trouble_of,
    worker_row,
)
from streamlease.cli.stream_text import (
    LAST_ERROR_MIN_CHARS,
    STREAM_DROP_FIRST,
    STREAM_HEADERS,
    STREAM_RIGHT,
    api_rate,
    stream_row,
)
from streamlease.cli.transport import TransportError
from streamlease.schema import DesiredState

CLEAR: Final = "\x1b[H\x1b[2J"
HIDE_CURSOR: Final = "\x1b[?25l"
SHOW_CURSOR: Final = "\x1b[?25h"
RATE_WINDOW_SECONDS: Final = 15.0
ONCE_MAX_SECONDS: Final = 15.0
"""Longest ``--once`` polls for a second checkpoint (three heartbeats at the defaults)."""
UNCUT: Final = 100_000
"""Line width of a frame written to a pipe: lines are not cut."""
DROP_FIRST: Final = (
    *STREAM_DROP_FIRST,
    "VERSION",
    "HOST",
    "HEARTBEAT",
)
"""Columns left out, in this order, when a table does not fit the terminal (``get`` shows a
stream whole)."""


@dataclass
class RateTracker:
    """Messages per second per stream from successive ``last_seq`` samples (monotonic seconds)."""

    window_seconds: float = RATE_WINDOW_SECONDS
    _samples: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)

    def observe(self, stream_id: str, now: float, last_seq: int) -> None:
        """Record ``last_seq`` as of ``now``; a lower ``last_seq`` (recreated stream) starts
        over."""
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


def observe_snapshot(rates: RateTracker, snapshot: Snapshot, now: float) -> None:
    """Record every stream's ``last_seq`` at the time it was checkpointed: ``now`` (monotonic
    seconds) less its owner's heartbeat age when the owner is listed, else ``now``."""
    ages = {w.get("id"): w.get("heartbeat_age_ms") for w in snapshot.workers}
    for stream in snapshot.streams:
        age = ages.get(stream.get("owner"))
        at = now - age / 1000 if isinstance(age, int | float) else now
        rates.observe(str(stream.get("id")), at, int(stream.get("last_seq") or 0))
    rates.forget_except({str(s.get("id")) for s in snapshot.streams})


def rates_known(rates: RateTracker, snapshot: Snapshot) -> bool:
    """True when every started stream with a live lease has a rate."""
    return all(
        stream_rate(rates, s) is not None
        for s in snapshot.streams
        if s.get("desired_state") == DesiredState.STARTED and s.get("lease_state") == "held"
    )


def stream_rate(rates: RateTracker, stream: dict[str, Any]) -> float | None:
    """Messages/s of a started stream: the API's, else from this watch's own samples once it
    has two; ``None`` for a stopped one (an old rate means nothing)."""
    if stream.get("desired_state") != DesiredState.STARTED:
        return None
    given = api_rate(stream)
    return rates.rate(str(stream.get("id"))) if given is None else given


def trouble_rank(stream: dict[str, Any], owned: list[dict[str, Any]]) -> int:
    """0: in trouble (held, nothing delivered), 1: wanted but not owned, 2: the rest (a stable
    sort keeps id order)."""
    if trouble_of(stream):
        return 0
    if stream.get("desired_state") == DesiredState.STARTED and stream not in owned:
        return 1
    return 2


def more_text(count: int, noun: str, hint: str) -> str:
    """``… 1 more stream (hint)`` / ``… 3 more streams (hint)``."""
    return f"… {count} more {noun}{'' if count == 1 else 's'} ({hint})"


def render_frame(
    snapshot: Snapshot,
    rates: RateTracker,
    *,
    api_url: str,
    width: int = 120,
    height: int | None = 40,
    now: float | None = None,
    retrying: bool = True,
    colour: bool = False,
) -> list[str]:
    """The lines of one frame: none wider than ``width`` columns and, with ``height``, fewer
    than ``height`` lines (the last line's newline must not scroll the screen). Streams in
    trouble come first, then orphaned ones, then the rest, each group in the given order.

    ``now`` is wall-clock seconds (the clock and connection ages); ``retrying`` says that a
    failed poll will be tried again; ``colour`` paints streams in trouble red.
    """
    wall = time.time() if now is None else now
    clock = time.strftime("%H:%M:%S", time.localtime(wall))
    at_ms = int(wall * 1000)
    lines = [f"streamlease watch  {clock}  {api_url}"]
    if snapshot.error:
        lines.append(f"API error: {snapshot.error}" + (" (retrying)" if retrying else ""))
        return [line[:width] for line in lines]
    streams, workers = snapshot.streams, snapshot.workers
    started = [s for s in streams if s.get("desired_state") == DesiredState.STARTED]
    owned = [s for s in started if s.get("owner") and (s.get("lease_remaining_ms") or 0) > 0]
    expired = [s for s in started if s.get("owner") and s not in owned]
    troubled = [s for s in owned if trouble_of(s)]
    known = [r for r in (stream_rate(rates, s) for s in started) if r is not None]
    total = f"{sum(known):.1f}" if known else NONE
    trouble_text = f"trouble {len(troubled)}" + (" (owned, not delivering)" if troubled else "")
    parts = [
        f"streams {len(streams)}",
        f"wanted {len(started)}",
        f"owned {len(owned)}",
        trouble_text,
        f"orphaned {len(started) - len(owned)} ({len(expired)} lease expired)",
        f"workers {len(workers)}",
        f"msgs/s {total}",
    ]
    for headline in pack(parts, width):
        if troubled and trouble_text in headline:
            headline = headline.replace(trouble_text, paint(trouble_text, RED, colour), 1)
        lines.append(headline)
    lines.append("")
    # Rows left for the two tables: this header, a blank line, each table's header and its
    # "more" line, and one row spare so the final newline does not scroll the frame.
    room = None if height is None else max(height - len(lines) - 6, 2)
    shown_workers = _fit(workers, None if room is None else max(room // 3, 1))
    # Streams in trouble first, so that a cut list still shows them.
    ordered = sorted(streams, key=lambda s: trouble_rank(s, owned))
    shown_streams = _fit(ordered, None if room is None else max(room - len(shown_workers), 1))

    rows = [stream_row(s, at_ms, stream_rate(rates, s)) for s in shown_streams]
    fitted, rows = fit_columns(
        STREAM_HEADERS, rows, width, drop=DROP_FIRST, last_min=LAST_ERROR_MIN_CHARS
    )
    stream_table = table(fitted, rows, right=STREAM_RIGHT, width=width)
    lines.append(stream_table[0])
    lines += [  # cut to the width already: painting adds only invisible characters
        row_colour(line, stream, colour)
        for line, stream in zip(stream_table[1:], shown_streams, strict=True)
    ]
    if len(streams) > len(shown_streams):
        hint = "make the terminal taller, or use `streamlease ls`"
        lines.append(more_text(len(streams) - len(shown_streams), "stream", hint))
    lines.append("")
    if workers:
        fitted, rows = fit_columns(
            WORKER_HEADERS, [worker_row(w) for w in shown_workers], width, drop=DROP_FIRST
        )
        lines += table(fitted, rows, right="STREAMS,PID", width=width)
        if len(workers) > len(shown_workers):
            hint = "see `streamlease workers`"
            lines.append(more_text(len(workers) - len(shown_workers), "worker", hint))
    else:
        lines.append("no live workers")
    return [line if "\x1b" in line else line[:width] for line in lines]  # painted: cut already


def _fit(rows: list[dict[str, Any]], room: int | None) -> list[dict[str, Any]]:
    """The rows that fit in ``room`` lines; the last is kept rather than replaced by its own
    "… 1 more" line."""
    if room is None or len(rows) <= room + 1:
        return rows
    return rows[:room]


def frame_json(snapshot: Snapshot, rates: RateTracker) -> dict[str, Any]:
    """The frame as data (``--json``): streams with ``msgs_per_s``, workers, error."""
    streams = [{**s, "msgs_per_s": stream_rate(rates, s)} for s in snapshot.streams]
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
    terminal: bool | None = None,
    colour: bool = True,
) -> int:
    """Poll and redraw until interrupted (Ctrl-C). Returns the exit code.

    ``once`` prints a single frame without screen control codes, once every held stream has a
    rate (polling every ``interval_seconds`` for at most :data:`ONCE_MAX_SECONDS`), and
    returns 1 if the API could not be read. On a terminal (``terminal``, default:
    ``out.isatty()``) lines fit its width, streams in trouble are red unless ``colour`` is off,
    and a live view fits its height too. ``sleep``, ``terminal_size`` and ``clock`` (monotonic
    seconds) are seams for tests. The redraw is a plain ANSI clear-screen, which every
    terminal and tmux handle.
    """
    on_terminal = out.isatty() if terminal is None else terminal
    rates = RateTracker()
    drawing = not once and not as_json
    if drawing:
        out.write(HIDE_CURSOR)
    first = clock()
    try:
        while True:
            started = clock()
            snapshot = take_snapshot(client)
            observe_snapshot(rates, snapshot, started)
            sampling = once and not snapshot.error and not rates_known(rates, snapshot)
            if sampling and started - first < ONCE_MAX_SECONDS:
                sleep(max(interval_seconds - (clock() - started), 0.05))
                continue
            if as_json:
                out.write(json.dumps(frame_json(snapshot, rates), separators=(",", ":")) + "\n")
            else:
                # A frame for a pipe is printed whole; on a terminal it fits the width, and a
                # live view the height too.
                columns, rows = terminal_size() if on_terminal or drawing else (UNCUT, UNCUT)
                lines = render_frame(
                    snapshot,
                    rates,
                    api_url=client.base_url,
                    width=columns,
                    height=rows if drawing else None,
                    retrying=not once,
                    colour=colour and on_terminal,
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
