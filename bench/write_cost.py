"""Write cost: DynamoDB requests and request units per stream-hour, counted, then priced.

Per preset (sessions, per-stream), one worker runs under :mod:`bench.request_counter` (every
DynamoDB request it sends is counted, with the write units it costs including index writes, and
the read units of its answers) and is given 25, then 50, then 100 streams. At each size, once
it holds them all and one heartbeat has passed, a steady window of whole heartbeats is counted:
session or stream renewals, the worker item, fleet re-reads, own-lease polls, reconcile queries,
and any acquisition that happens in it. Everything the worker sent in the window is divided by
the streams it actually held (from its lease events, at both ends of the window), never by its
capacity, and converted to production timers: with every timer scaled by ``k``, the scaled
system sends ``1/k`` times the requests per second, so production per stream-hour = measured per
stream-second × ``k`` × 3600. The fleet re-read interval is scaled exactly here (no floor), so
that conversion holds for it too.

The section runs at the run's ``--scale`` but never below :data:`MIN_COST_SCALE`: per-stream
renewals of 100 streams at a tenth of production's heartbeat would ask more of the serialised
moto server than it answers.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.common import Table, timers_label
from bench.context import PER_STREAM, PRESET_LABELS, RENEWAL_PRESETS, SESSIONS, BenchContext
from bench.request_counter import diff
from bench.write_units import WRITE_OPERATIONS, item_size_bytes
from local.testbed import Testbed
from local.worker_process import PRODUCTION_LEASE_SECONDS
from streamlease import aws
from streamlease.indexes import BY_SHARD_EXPIRY, FLEET
from streamlease.schema import PK, worker_key
from streamlease.settings import Settings

WRITE_PRICE_PER_MILLION: Final = 0.625
"""USD per million write request units, DynamoDB on-demand, us-east-1 (Standard table class)."""
READ_PRICE_PER_MILLION: Final = 0.125
"""USD per million read request units, DynamoDB on-demand, us-east-1."""
HOURS_PER_MONTH: Final = 730.0
PER_STREAMS: Final = 1000
SIZES: Final = (25, 50, 100)
"""Streams per worker at which the cost is measured (100 = a full worker at defaults)."""
QUICK_SIZES: Final = (25, 100)
WINDOW_HEARTBEATS: Final = 12
QUICK_WINDOW_HEARTBEATS: Final = 6
MIN_COST_SCALE: Final = 0.25
"""Lowest timer scale of this section: per-stream renewals of 100 streams every 1.25 s are 80
requests/s, well inside what the serialised moto server answers (~180/s)."""
SESSION_RENEWAL: Final = "UpdateItem worker"
"""How :mod:`bench.request_counter` names a write of the worker item (the session renewal; in
per-stream mode the worker item's heartbeat)."""
STREAM_WRITE: Final = "UpdateItem stream"
GOAL_WRITE_UNITS: Final = 40.0
"""Sessions at 100 streams per worker: write units per stream-hour (architecture §4a)."""
GOAL_DOLLARS: Final = 20.0
"""Sessions: $ per month per 1,000 streams, on demand."""


@dataclass
class CostWindow:
    """What one steady window counted: one preset, one worker, one number of streams."""

    preset: str
    streams: int
    """Streams the worker was given."""
    held: int
    """Streams it held through the whole window (the fewer of both ends)."""
    seconds: float
    scale: float
    counts: dict[str, Any]
    """:func:`bench.request_counter.diff` of the window."""
    ramp: dict[str, Any]
    """The same counts for the ramp before the window (acquisitions, start-up)."""
    worker_item_bytes: int | None
    """Size of the worker item at the window's end by DynamoDB's rule (None: not read)."""

    def per_stream_hour(self, count: float) -> float:
        """Production count per stream-hour of a count over this window."""
        return count / max(1, self.held) / self.seconds * self.scale * 3600

    def per_worker_hour(self, count: float) -> float:
        """Production count per worker-hour of a count over this window."""
        return count / self.seconds * self.scale * 3600

    @property
    def write_units(self) -> float:
        """Write units (table + indexes) of every write in the window."""
        return float(sum(self.counts["write_units"].values()))

    @property
    def index_units(self) -> float:
        """The index part of :attr:`write_units`."""
        return float(sum(v for k, v in self.counts["write_units"].items() if k != "table"))

    @property
    def write_requests(self) -> int:
        """Write requests (any outcome) in the window."""
        return sum(v for k, v in self.counts["by_target"].items() if _is_write(k))

    @property
    def dollars_per_month(self) -> float:
        """$ per month per :data:`PER_STREAMS` streams at this window's rates (on demand)."""
        writes = self.per_stream_hour(self.write_units) * WRITE_PRICE_PER_MILLION
        reads = self.per_stream_hour(self.counts["read_units"]) * READ_PRICE_PER_MILLION
        return (writes + reads) / 1e6 * HOURS_PER_MONTH * PER_STREAMS


def _load(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return {}


def _fresh_counts(path: Path) -> dict[str, Any]:
    """The counts file once the counter has rewritten it after this call began (every 0.5 s),
    or as it is after 5 s."""
    asked = time.time()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if path.stat().st_mtime > asked:
                break
        time.sleep(0.05)
    return _load(path)


def _held(bed: Testbed, worker_id: str, ids: set[str]) -> int:
    return sum(1 for s, owner in bed.owners().items() if s in ids and owner == worker_id)


def _worker_item_bytes(settings: Settings, worker_id: str) -> int | None:
    """The worker item's size now (a consistent read from this process, not counted)."""
    client = aws.client("dynamodb", settings)
    try:
        item = client.get_item(
            TableName=settings.table_name,
            Key={PK: {"S": worker_key(worker_id)}},
            ConsistentRead=True,
        ).get("Item")
    except Exception:  # a figure for a note: its absence must not sink the section
        return None
    return None if item is None else item_size_bytes(item)


def cost_scale(ctx: BenchContext) -> float:
    """The timer scale this section runs at: the run's, at least :data:`MIN_COST_SCALE`."""
    return max(ctx.scale, MIN_COST_SCALE)


def measure(
    ctx: BenchContext,
    preset: str,
    sizes: tuple[int, ...],
    window_heartbeats: int,
    scale: float | None = None,
) -> list[CostWindow]:
    """One worker of ``preset`` given ``sizes`` streams in turn; a steady window of
    ``window_heartbeats`` heartbeats counted at each (see the module docstring)."""
    scale = cost_scale(ctx) if scale is None else scale
    production = Settings()
    settings = ctx.settings(
        preset, scale=scale, fleet_recount_seconds=production.fleet_recount_seconds * scale
    )
    heartbeat = settings.heartbeat_seconds
    counts = ctx.work_dir / f"counts-{preset}.json"
    command = ("-m", "bench.request_counter", "--counts-file", str(counts), "--")
    out: list[CostWindow] = []
    with ctx.testbed(f"write-{preset}", settings, rate=1.0) as bed:
        worker = bed.add_worker(command=command)
        ids: list[str] = []
        previous = _load(counts)
        for size in sizes:
            ids += bed.create_streams(size - len(ids), prefix=f"c{size}-")
            ctx.progress.update(f"{preset}: waiting for {size} streams to be owned", force=True)
            bed.wait_all_owned(ids, timeout_seconds=60 + size * 0.5)
            time.sleep(heartbeat)  # acquisitions' follow-up writes and one renewal settle
            wanted = set(ids)
            held_start = _held(bed, worker.worker_id, wanted)
            start, t0 = _fresh_counts(counts), time.monotonic()
            window = window_heartbeats * heartbeat
            while time.monotonic() - t0 < window:
                ctx.progress.update(
                    f"{preset}, {size} streams: counting"
                    f" ({time.monotonic() - t0:.0f}/{window:.0f} s)"
                )
                time.sleep(min(0.5, max(0.0, window - (time.monotonic() - t0))))
            end = _fresh_counts(counts)
            held = min(held_start, _held(bed, worker.worker_id, wanted))
            counted = diff(end, start)
            out.append(
                CostWindow(
                    preset=preset,
                    streams=size,
                    held=held,
                    seconds=counted.get("seconds") or time.monotonic() - t0,
                    scale=scale,
                    counts=counted,
                    ramp=diff(start, previous),
                    worker_item_bytes=_worker_item_bytes(settings, worker.worker_id),
                )
            )
            previous = end
    return out


def run(ctx: BenchContext) -> list[Table]:
    """The write-cost section: sessions and per-stream, 25 / 50 / 100 streams per worker."""
    sizes = QUICK_SIZES if ctx.quick else SIZES
    heartbeats = QUICK_WINDOW_HEARTBEATS if ctx.quick else WINDOW_HEARTBEATS
    scale = cost_scale(ctx)
    results = {p: measure(ctx, p, sizes, heartbeats, scale) for p in RENEWAL_PRESETS}
    ctx.shared["write_cost_windows"] = results  # the cost section prices them
    return [
        cost_table(results, scale, heartbeats),
        breakdown_table(results, scale),
    ]


def cost_table(results: dict[str, list[CostWindow]], scale: float, heartbeats: int) -> Table:
    """Per preset and streams per worker: requests, units and dollars per stream-hour."""
    production = Settings()
    lease = PRODUCTION_LEASE_SECONDS * scale
    table = Table(
        f"Write cost per stream-hour (measured at {timers_label(scale)}: lease {lease:g} s;"
        f" converted to production timers: heartbeat {production.heartbeat_seconds:g} s)",
        [
            "preset",
            "streams per worker (held)",
            "write requests / stream-h",
            "write units / stream-h",
            "of which index units",
            "of which worker-item units",
            "read units / stream-h",
            f"$ / month per {PER_STREAMS:,} streams",
        ],
    )
    for preset, windows in results.items():
        for w in windows:
            units = w.per_stream_hour(w.write_units)
            index = w.per_stream_hour(w.index_units)
            worker_units = w.per_stream_hour(w.counts["write_units_by_target"].get("worker", 0))
            table.add(
                PRESET_LABELS[preset],
                f"{w.streams} ({w.held})",
                w.per_stream_hour(w.write_requests),
                units,
                f"{index:,.1f} ({index / units:.0%})" if units else None,
                worker_units,
                w.per_stream_hour(w.counts["read_units"]),
                w.dollars_per_month,
            )
    naive = 3600 / production.heartbeat_seconds
    naive_dollars = naive * WRITE_PRICE_PER_MILLION / 1e6 * HOURS_PER_MONTH * PER_STREAMS
    table.notes += [
        f"Each row: one worker, a steady window of {heartbeats} heartbeats after it held every"
        " stream; all of its DynamoDB requests counted (botocore hooks in the worker process):"
        " renewals, the worker item, fleet re-reads, own-lease polls, reconcile queries, and"
        " any acquisition in the window. Per-worker costs are divided by the streams it held"
        " (in brackets), not by its capacity. Converted to production timers: measured per"
        f" stream-second × {scale:g} × 3600.",
        f"Prices: DynamoDB on-demand us-east-1, ${WRITE_PRICE_PER_MILLION} per million write"
        f" request units, ${READ_PRICE_PER_MILLION} per million read request units,"
        f" {HOURS_PER_MONTH:.0f} h per month.",
        "Write units: 1 per started KB of the item (estimated from what the request writes plus"
        " 400 bytes for the rest), plus every index entry the write changes (a moved index key:"
        " delete + insert = 2). Read units: 4 KB per unit of the answer's size, half for an"
        " eventually consistent read (the JSON answer is larger than DynamoDB's item sizes:"
        " errs high).",
        f"Per-stream: one write per heartbeat would be {naive:,.0f} units per stream-hour"
        f" (${naive_dollars:,.0f} per month per 1,000 streams); every per-stream renewal also"
        f" moves lease_expires_at_ms, the sort key of {BY_SHARD_EXPIRY.name}: 3 units, not 1.",
        *_session_notes(results.get(SESSIONS, []), results.get(PER_STREAM, [])),
    ]
    return table


def _session_notes(sessions: list[CostWindow], per_stream: list[CostWindow]) -> list[str]:
    """What a session renewal cost as counted, the worker item's real size, the goals."""
    notes = []
    for w in sessions:
        renewals = w.counts["by_target"].get(SESSION_RENEWAL, 0)
        if not renewals:
            notes.append(f"sessions, {w.streams} streams: no session renewal counted in the window")
            continue
        units = w.counts["write_units_by_request"].get(SESSION_RENEWAL, 0) / renewals
        index = w.counts["index_units_by_request"].get(SESSION_RENEWAL, 0) / renewals
        size = (
            f"; the worker item read back is {w.worker_item_bytes:,} bytes by DynamoDB's size"
            f" rule = {max(1, math.ceil(w.worker_item_bytes / 1024))} table unit(s)"
            if w.worker_item_bytes is not None
            else ""
        )
        notes.append(
            f"Session renewal at {w.held} streams: {renewals} counted, {units:.2f} write units"
            f" each (table {units - index:.2f} + {FLEET.name} index {index:.2f}: its projected"
            f" fields, no key move){size}."
        )
    notes.append(
        "tests/moto/test_bench_write_units.py expects a session renewal to cost 1 table unit +"
        f" 1 {FLEET.name} unit at 100 streams, and a per-stream renewal 1 + 2"
        f" {BY_SHARD_EXPIRY.name}."
    )
    units = sum(w.ramp["write_units_by_request"].get(STREAM_WRITE, 0) for w in sessions)
    count = sum(w.ramp["by_target"].get(STREAM_WRITE, 0) for w in sessions)
    if count:
        notes.append(
            f"Ownership changes are not in a steady window: a sessions acquisition cost"
            f" {units / count:.1f} write units as counted while the worker filled up (table +"
            f" by-owner + {BY_SHARD_EXPIRY.name} entries); a stream that moves once a day adds"
            f" {units / count / 24:.2f} units per stream-hour (a release costs about as much)."
        )
    notes += _fleet_read_notes(sessions)
    full = [w for w in sessions if w.streams == max(SIZES)]
    if full:
        w = full[-1]
        units = w.per_stream_hour(w.write_units)
        notes.append(
            f"Goal at {w.streams} streams per worker, sessions: ≤ {GOAL_WRITE_UNITS:g} write units"
            f" per stream-hour ({units:,.1f}: {'met' if units <= GOAL_WRITE_UNITS else 'not met'})"
            f" and ≤ ${GOAL_DOLLARS:g} per month per 1,000 streams (${w.dollars_per_month:,.2f}:"
            f" {'met' if w.dollars_per_month <= GOAL_DOLLARS else 'not met'})"
            + _versus(w, per_stream)
            + "."
        )
    return notes


FLEET_QUERY: Final = f"Query {FLEET.name}"
LARGE_FLEET_WORKERS: Final = 100


def _fleet_read_notes(sessions: list[CostWindow]) -> list[str]:
    """Fleet re-reads grow with the fleet: what they cost beyond the fleet of one measured."""
    if not sessions:
        return []
    w = sessions[-1]
    reads = w.counts["by_target"].get(FLEET_QUERY, 0)
    answer = w.counts["read_bytes_by_request"].get(FLEET_QUERY, 0)
    if not reads or not answer:
        return []
    per_item = answer / reads  # one worker in this fleet: its item plus the answer's envelope
    per_second = reads / w.seconds * w.scale
    units = per_second * 3600 * 0.5 * math.ceil(LARGE_FLEET_WORKERS * per_item / 4096)
    per_stream = units / max(1, w.held)
    dollars = per_stream * READ_PRICE_PER_MILLION / 1e6 * HOURS_PER_MONTH * PER_STREAMS
    return [
        f"Measured with a fleet of one: each fleet re-read ({per_second:.2f}/s per worker at"
        f" production timers) answered {per_item:,.0f} bytes, half a read unit. Every worker"
        " reads every worker item, so the answer grows with the fleet: up to"
        f" ~{int(4096 // per_item)} workers a re-read stays half a unit; at"
        f" {LARGE_FLEET_WORKERS} workers of {w.held} streams it would be up to"
        f" ~{per_stream:,.0f} read units per stream-hour (${dollars:,.2f} per month per 1,000"
        " streams) on top of the figures above: an estimate from the answer's JSON size, which"
        " is larger than DynamoDB's item sizes, so it errs high; not measured."
    ]


def _versus(w: CostWindow, per_stream: list[CostWindow]) -> str:
    same = [p for p in per_stream if p.streams == w.streams]
    if not same:
        return ""
    other = same[-1].per_stream_hour(same[-1].write_units)
    mine = w.per_stream_hour(w.write_units)
    return f"; per-stream at the same size: {other:,.0f} units, {other / mine:,.0f}× as many"


def breakdown_table(results: dict[str, list[CostWindow]], scale: float) -> Table:
    """Where the units go, per request kind, at the largest size each preset measured."""
    table = Table(
        f"Where the units go (the largest size per preset; measured at {timers_label(scale)},"
        " converted to production timers)",
        [
            "preset",
            "request",
            "requests / worker-h",
            "write units / stream-h",
            "of which index",
            "read units / stream-h",
        ],
    )
    for preset, windows in results.items():
        if not windows:
            continue
        w = windows[-1]
        for key, count in sorted(w.counts["by_target"].items()):
            if not count:
                continue
            table.add(
                f"{PRESET_LABELS[preset]}, {w.held} streams",
                key,
                w.per_worker_hour(count),
                w.per_stream_hour(w.counts["write_units_by_request"].get(key, 0)),
                w.per_stream_hour(w.counts["index_units_by_request"].get(key, 0)),
                w.per_stream_hour(w.counts["read_units_by_request"].get(key, 0)),
            )
    table.notes.append(
        "Request: operation and what it is about: a stream or worker item, or the index queried"
        " (fleet re-reads: the fleet index; own-lease polls: by-owner; reconcile:"
        f" {BY_SHARD_EXPIRY.name}). Failed conditional writes are included (their table unit)."
    )
    return table


def _is_write(key: str) -> bool:
    return key.split()[0] in WRITE_OPERATIONS
