"""Write cost: DynamoDB requests and request units per stream-hour, counted, then priced.

One worker runs under :mod:`bench.request_counter` (every request it sends is counted, with the
write units it costs including index writes) and holds N streams. The counts of a steady window
(everything owned, nobody joining or leaving) are divided by streams × seconds and converted to
production timers: with every timer scaled by ``k``, the scaled system does ``1/k`` times the
requests per second, so production per stream-hour = measured per stream-second × ``k`` × 3600.
Per-stream costs (renewals of stream items) and per-worker costs (the worker item's heartbeat,
reconcile queries) are reported apart; the per-worker cost is spread over a worker's capacity.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Final

from bench.common import Table, timers_label
from bench.context import PRESET_LABELS, PRESETS, BenchContext
from bench.request_counter import diff
from bench.write_units import WRITE_OPERATIONS
from streamlease.settings import Settings

WRITE_PRICE_PER_MILLION: Final = 0.625
"""USD per million write request units, DynamoDB on-demand, us-east-1 (Standard table class)."""
READ_PRICE_PER_MILLION: Final = 0.125
"""USD per million read request units, DynamoDB on-demand, us-east-1."""
HOURS_PER_MONTH: Final = 730.0
PER_STREAMS: Final = 1000


def _load(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return {}


def measure(ctx: BenchContext, preset: str, streams: int, window_seconds: float) -> dict[str, Any]:
    """Counts of one worker holding ``streams`` streams over a steady window (see module doc)."""
    settings = ctx.settings(preset)
    counts = ctx.work_dir / f"counts-{preset}.json"
    command = ("-m", "bench.request_counter", "--counts-file", str(counts), "--")
    with ctx.testbed(f"write-{preset}", settings, rate=1.0) as bed:
        bed.add_worker(command=command)
        ids = bed.create_streams(streams)
        ctx.progress.update(f"{preset}: waiting for {streams} streams to be owned", force=True)
        bed.wait_all_owned(ids, timeout_seconds=60 + streams * 0.2)
        time.sleep(1.0)  # let acquisitions' follow-up writes settle
        start, t0 = _load(counts), time.monotonic()
        while time.monotonic() - t0 < window_seconds:
            ctx.progress.update(
                f"{preset}: counting ({time.monotonic() - t0:.0f}/{window_seconds:.0f} s)"
            )
            time.sleep(0.5)
        # The counter rewrites its file every 0.5 s: wait for one rewrite after the window.
        time.sleep(0.6)
        end, t1 = _load(counts), time.monotonic()
        owned = len(bed.owners())
    delta = diff(end, start)
    delta["seconds"] = t1 - t0
    delta["streams"] = owned
    delta["workers"] = 1
    return delta


def _per_hour(count: float, per: float, seconds: float, scale: float) -> float:
    """Production count per hour of one ``per`` unit (stream or worker)."""
    return count / per / seconds * scale * 3600


def run(ctx: BenchContext) -> list[Table]:
    """The write-cost section: both presets, side by side."""
    streams = 10 if ctx.quick else 40
    window = 4.0 if ctx.quick else 20.0
    results = {p: measure(ctx, p, streams, window) for p in PRESETS}
    capacity = Settings().capacity
    per_stream = Table(
        f"Write cost per stream-hour (measured at {timers_label(ctx.scale)}, lease"
        f" {ctx.lease_seconds:g} s; converted to production timers: heartbeat 5 s)",
        [
            "preset",
            "write requests / stream-h",
            "write units / stream-h",
            "of which index units",
            "worker-item write units / stream-h",
            "read units / stream-h",
            f"$ / month per {PER_STREAMS:,} streams",
        ],
    )
    breakdown = Table(
        f"Where the requests go (per hour; measured at {timers_label(ctx.scale)}, converted to"
        " production timers)",
        ["preset", "request", "per stream-h", "per worker-h"],
    )
    for preset, d in results.items():
        seconds, n = d["seconds"], max(1, d["streams"])
        by_target = d["by_target"]
        stream_writes = sum(
            v for k, v in by_target.items() if _is_write(k) and k.endswith(" stream")
        )
        units_by_target = d["write_units_by_target"]
        stream_units = units_by_target.get("stream", 0)
        worker_units = sum(v for k, v in units_by_target.items() if k != "stream")
        index_units = sum(v for k, v in d["write_units"].items() if k != "table")
        table_units = d["write_units"].get("table", 0)
        index_share = index_units / max(1, index_units + table_units)
        stream_wru = _per_hour(stream_units, n, seconds, ctx.scale)
        worker_wru_per_stream = _per_hour(worker_units, capacity, seconds, ctx.scale)
        read_per_stream = _per_hour(d["read_units"], capacity, seconds, ctx.scale)
        dollars = (
            (
                (stream_wru + worker_wru_per_stream) * WRITE_PRICE_PER_MILLION
                + read_per_stream * READ_PRICE_PER_MILLION
            )
            / 1e6
            * HOURS_PER_MONTH
            * PER_STREAMS
        )
        per_stream.add(
            PRESET_LABELS[preset],
            _per_hour(stream_writes, n, seconds, ctx.scale),
            stream_wru,
            f"{stream_wru * index_share:,.0f} ({index_share:.0%})",
            worker_wru_per_stream,
            read_per_stream,
            dollars,
        )
        for key, count in sorted(by_target.items()):
            if not count:
                continue
            per_s = _per_hour(count, n, seconds, ctx.scale) if key.endswith(" stream") else None
            per_w = _per_hour(count, 1, seconds, ctx.scale)
            breakdown.add(PRESET_LABELS[preset], key, per_s, per_w)
    naive = 3600 / Settings().heartbeat_seconds
    naive_dollars = naive * WRITE_PRICE_PER_MILLION / 1e6 * HOURS_PER_MONTH * PER_STREAMS
    per_stream.notes += [
        f"Measured over {window:.0f} s with {streams} streams on one worker at {1 / ctx.scale:g}×"
        " speed, counted from the requests the worker sent (botocore hooks), converted to"
        " production timers.",
        f"Prices: DynamoDB on-demand us-east-1, ${WRITE_PRICE_PER_MILLION} per million write"
        f" request units, ${READ_PRICE_PER_MILLION} per million read request units,"
        f" {HOURS_PER_MONTH:.0f} h per month. Per-worker costs are spread over a full worker"
        f" ({capacity} streams).",
        f"A model that counts one write per heartbeat gives {naive:,.0f} write units per"
        f" stream-hour (${naive_dollars:,.0f}"
        " per month per 1,000 streams); every renewal also moves lease_expires_at_ms, the sort"
        " key of by-state-expiry, which costs an index delete and insert: 3 units, not 1.",
        "Items are under 1 KB (one unit per table write); a failed conditional write costs its"
        " table unit and no index unit.",
    ]
    return [per_stream, breakdown]


def _is_write(key: str) -> bool:
    return key.split()[0] in WRITE_OPERATIONS
