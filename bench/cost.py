"""Cost: what 1,000 held streams cost a month, every line, from what this run measures.

Measured here, at 1 and at 10 messages/s per stream: one ``python -m worker`` (sessions, our
timers) holds N streams (1,000; ``--quick``: 100) of the upstream simulator and writes to the
``kinesis`` sink, aggregation on, on the local moto server, into a stream of four shards (an
on-demand stream's first size). Over a steady window: the worker's CPU (``/proc``), its memory
growth per held stream, the bytes it writes to stdout and stderr (its JSON logs and EMF metrics:
what CloudWatch Logs ingests, priced at production's flush interval); then every Kinesis record
of the window is read back and deaggregated: records and bytes per message, and each message's
time from the worker receiving it to Kinesis storing it (the sink's added latency). The JSON
record each message would be with aggregation off is encoded from the same messages. DynamoDB
request units per worker-hour come from the write-cost section (this run's, or measured here at
two sizes) as a line ``fixed + per stream × streams``. A third table prices the consumer's
watermarks (:mod:`bench.consumer_cost`) on the shards sized from those runs.

:mod:`bench.cost_model` turns that into the bill of today's defaults (x86 0.5 vCPU / 1 GB tasks
of 100 streams, one Kinesis record of JSON per message, on demand) and of the recommended
configuration (arm64 0.25 vCPU / 0.5 GB tasks sized from the measured CPU and memory, aggregated
records into a provisioned stream sized from the measured bytes, Container Insights off), with
:mod:`bench.prices`.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any, Final

from bench import consumer_cost, cost_model, upstream_throughput, worker_scale, write_cost
from bench import prices as p
from bench.common import Table
from bench.context import PER_STREAM, SESSIONS, BenchContext
from bench.cost_logs import largest_flush_emf_bytes, production_log_rate
from bench.cost_model import DynamoCost, Fleet, Measured
from bench.throughput import _rss_kib, _wait_started
from local.worker_process import PRODUCTION_LEASE_SECONDS, WorkerProcess, scaled_settings
from streamlease import aws
from streamlease.kinesis_records import StreamMessage, read_record
from streamlease.settings import Settings
from streamlease.telemetry import AuditorMetric, WorkerMetric
from worker.metrics import MAX_EMF_VALUES
from worker.os_limits import raise_open_file_limit
from worker.sinks import BatchHeader, SinkRecord, encode_record
from worker.sinks.kinesis import partition_key

RATES: Final = (1.0, 10.0)
SHARDS: Final = 4
GOALS: Final = {1.0: 60.0, 10.0: 150.0}
"""Recommended configuration, public networking: $ a month per 1,000 streams at each rate."""
RECORDS_PER_MESSAGE_GOAL: Final = 0.05
OVERHEAD_GOAL_BYTES: Final = 40
ALARMS: Final = 12
INTERFACE_ENDPOINTS: Final = 6
TODAY: Final = Fleet("today's defaults", 0.5, 1.0, arm64=False, capacity=100, aggregation=False)


@dataclass(frozen=True)
class Size:
    """How much the section measures: streams on the worker, seconds of each steady window,
    the worker's metrics flush interval, and the write-cost sizes and window (heartbeats) of
    the DynamoDB line when the write-cost section did not run."""

    streams: int
    seconds: float
    flush_seconds: float = worker_scale.FLUSH_SECONDS
    dynamo_sizes: tuple[int, ...] = write_cost.QUICK_SIZES
    dynamo_heartbeats: int = write_cost.QUICK_WINDOW_HEARTBEATS
    timer_scale: float | None = None
    """None: the sink runs at production's timers (what the figures are for) and the DynamoDB
    line at the write-cost section's scale; a number: both at that scale (a smoke run)."""


FULL: Final = Size(1000, 30.0)
QUICK: Final = Size(100, 10.0)


@dataclass
class SinkRun:
    """One worker at one rate: what :class:`~bench.cost_model.Measured` needs, and latency."""

    measured: Measured
    latency_ms: list[float]
    messages: int
    records: int


def _kinesis_window(
    settings: Any, start_ms: int, end_ms: int
) -> tuple[list[StreamMessage], int, int, list[float]]:
    """Messages received in [start_ms, end_ms), the records holding them, their bytes, and
    each message's store time − receive time (ms)."""
    kinesis = aws.client("kinesis", settings)
    messages: list[StreamMessage] = []
    records = size = 0
    latency: list[float] = []
    for shard in kinesis.list_shards(StreamName=settings.kinesis_stream_name)["Shards"]:
        iterator: str | None = kinesis.get_shard_iterator(
            StreamName=settings.kinesis_stream_name,
            ShardId=shard["ShardId"],
            ShardIteratorType="TRIM_HORIZON",
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for r in page["Records"]:
                inside = [
                    m
                    for m in read_record(r["Data"], r["PartitionKey"])
                    if start_ms <= m.received_at_ms < end_ms
                ]
                if not inside:
                    continue
                records += 1
                size += len(r["Data"]) + len(r["PartitionKey"].encode())
                stored_ms = r["ApproximateArrivalTimestamp"].timestamp() * 1000
                latency += [stored_ms - m.received_at_ms for m in inside]
                messages += inside
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return messages, records, size, latency


def sink_run(
    ctx: BenchContext,
    port: int,
    streams: int,
    rate: float,
    seconds: float,
    flush_seconds: float = worker_scale.FLUSH_SECONDS,
    timer_scale: float | None = None,
) -> SinkRun:
    """One worker holding ``streams`` at ``rate`` msg/s into an aggregating Kinesis sink,
    flushing its metrics every ``flush_seconds`` (the windows end on flushes), at production's
    timers or at ``timer_scale`` of them."""
    name = f"cost{rate:g}"
    settings = ctx.resources(name)
    if timer_scale is not None:
        settings = scaled_settings(settings, PRODUCTION_LEASE_SECONDS * timer_scale)
    kinesis = aws.client("kinesis", settings)
    stream = f"{settings.kinesis_stream_name}-{SHARDS}"
    kinesis.create_stream(StreamName=stream, ShardCount=SHARDS)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream)
    settings = dataclasses.replace(
        settings,
        kinesis_stream_name=stream,
        worker_id=f"bench-{name}/1-{uuid.uuid4().hex[:4]}",
        capacity=streams + 10,
        sink="kinesis",
        kinesis_aggregation=True,
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        metrics_flush_seconds=flush_seconds,
        health_file=str(ctx.work_dir / f"{name}.health"),
    )
    log = ctx.work_dir / f"{name}.log"
    worker = WorkerProcess.start(settings, name, log)
    try:
        _wait_started(worker)
        rss_empty = _rss_kib(worker.pid)
        empty = worker_scale.measure(worker, 0, min(seconds, 10.0))
        ids = [f"c{rate:g}-{i:05d}" for i in range(streams)]
        worker_scale.seed(settings, ids, lambda s: f"ws://127.0.0.1:{port}/{s}?rate={rate:g}")
        ctx.progress.update(f"{streams} streams at {rate:g} msg/s, kinesis sink", force=True)
        window = worker_scale.measure(
            worker,
            streams,
            seconds,
            settle_seconds=flush_seconds,
            ramp_timeout_seconds=60 + streams * 0.1,
        )
        end_ms = int(time.time() * 1000)
        rss_full = _rss_kib(worker.pid)
    finally:
        worker.stop(settings.shutdown_budget_seconds + 10)
    start_ms = end_ms - int(window.seconds * 1000)
    messages, records, size, latency = _kinesis_window(settings, start_ms, end_ms - 2000)
    if not messages:
        raise RuntimeError("no message of the window reached the Kinesis stream")
    json_sizes = [
        len(
            encode_record(
                BatchHeader(m.stream_id, m.epoch, m.worker_id or ""),
                SinkRecord(m.seq, m.received_at_ms, m.payload, m.payload_encoding),
            )
        )
        + len(partition_key(m.stream_id).encode())
        for m in messages
    ]
    fixed = empty.cpu_seconds / empty.seconds
    measured = Measured(
        rate=rate,
        cpu_per_stream=max(0.0, window.cpu_seconds / window.seconds - fixed)
        / max(1, window.held_min),
        cpu_per_worker=fixed,
        memory_per_stream=(rss_full - rss_empty) * 1024 / max(1, window.held_min),
        records_per_message=records / len(messages),
        bytes_per_message=size / len(messages),
        json_bytes_per_message=statistics.fmean(json_sizes),
        payload_bytes=statistics.fmean(len(m.payload) for m in messages),
        log_bytes_per_worker_second=production_log_rate(log, window.log_span, window.seconds),
    )
    return SinkRun(measured, latency, len(messages), records)


def dynamo_cost(ctx: BenchContext, size: Size = FULL) -> tuple[DynamoCost, float, str]:
    """Sessions' units per worker-hour as a line through two sizes, and the seed design's
    (per-stream) $ a month per 1,000 streams; from the write-cost section if it ran, else
    measured at ``size``'s write-cost sizes."""
    windows = ctx.shared.get("write_cost_windows")
    source = "the write-cost section of this run"
    if windows is None:
        source = "measured here (write-cost method, two sizes)"
        sizes, beats = size.dynamo_sizes, size.dynamo_heartbeats
        windows = {
            SESSIONS: write_cost.measure(ctx, SESSIONS, sizes, beats, size.timer_scale),
            PER_STREAM: write_cost.measure(ctx, PER_STREAM, sizes[:1], beats, size.timer_scale),
        }
    small, large = windows[SESSIONS][0], windows[SESSIONS][-1]

    def line(count: Any) -> tuple[float, float]:
        a = small.per_worker_hour(count(small))
        b = large.per_worker_hour(count(large))
        per_stream = max(0.0, (b - a) / max(1, large.held - small.held))
        return max(0.0, a - per_stream * small.held), per_stream

    write_fixed, write_per = line(lambda w: w.write_units)
    read_fixed, read_per = line(lambda w: float(w.counts["read_units"]))
    seed = windows[PER_STREAM][-1].dollars_per_month
    return DynamoCost(write_fixed, write_per, read_fixed, read_per), seed, source


def recommended(measured: Measured) -> Fleet:
    """The recommended configuration at ``measured``'s rate."""
    capacity = cost_model.capacity_for(measured, 0.25, 0.5)
    return Fleet(
        "recommended",
        0.25,
        0.5,
        arm64=True,
        capacity=capacity,
        provisioned_sink=True,
        container_insights=False,
    )


def run(ctx: BenchContext, size: Size | None = None) -> list[Table]:
    """The cost section: measure at 1 and 10 msg/s, then price both configurations.
    ``size``: :data:`QUICK` with ``--quick``, else :data:`FULL`."""
    size = size or (QUICK if ctx.quick else FULL)
    raise_open_file_limit()
    runs: dict[float, SinkRun] = {}
    with upstream_throughput.simulator_process() as (port, _):
        for rate in RATES:
            runs[rate] = sink_run(
                ctx,
                port,
                size.streams,
                rate,
                size.seconds,
                size.flush_seconds,
                size.timer_scale,
            )
    dynamo, seed_dollars, dynamo_source = dynamo_cost(ctx, size)
    published = sum(_names(kind) for kind in (WorkerMetric, AuditorMetric))
    cloudwatch = (published, ALARMS, 1)
    consumer = consumer_cost.table(
        ctx,
        {rate: cost_model.shards_for(run.measured) for rate, run in runs.items()},
        {rate: run.measured.bytes_per_message for rate, run in runs.items()},
    )
    return [
        bill_table(runs, dynamo, seed_dollars, dynamo_source, cloudwatch, size.streams),
        sink_table(runs, size.streams),
        consumer,
    ]


def _names(kind: type) -> int:
    """How many metric names a telemetry class defines (one metric each: no per-task
    dimension)."""
    return sum(1 for k, v in vars(kind).items() if not k.startswith("_") and isinstance(v, str))


def bill_table(
    runs: dict[float, SinkRun],
    dynamo: DynamoCost,
    seed_dollars: float,
    dynamo_source: str,
    cloudwatch: tuple[int, int, int],
    streams: int,
) -> Table:
    """Every line, today's defaults and the recommended configuration, at each rate."""
    columns = [(fleet, rate) for fleet in ("today", "recommended") for rate in RATES]
    table = Table(
        f"Cost: $ a month per 1,000 held streams ({p.REGION} list prices of {p.CHECKED};"
        f" measured with {streams:,} streams on one worker)",
        ["line", *(f"{f} @ {r:g} msg/s" for f, r in columns), "how (recommended @ 10 msg/s)"],
    )
    bills: dict[tuple[str, float], list[cost_model.Line]] = {}
    fleets: dict[tuple[str, float], Fleet] = {}
    for name, rate in columns:
        measured = runs[rate].measured
        fleet = TODAY if name == "today" else recommended(measured)
        fleets[(name, rate)] = fleet
        bills[(name, rate)] = cost_model.bill(fleet, measured, dynamo, cloudwatch)
    items = list(dict.fromkeys(line.item for b in bills.values() for line in b))
    for item in items:
        cells = []
        for key in columns:
            found = [line.dollars for line in bills[key] if line.item == item]
            cells.append(f"${found[0]:,.2f}" if found else None)
        how = next((line.source for line in bills[("recommended", 10.0)] if line.item == item), "")
        if not how:
            how = next(line.source for b in bills.values() for line in b if line.item == item)
        table.add(item, *cells, how)
    totals = {key: sum(line.dollars for line in b) for key, b in bills.items()}
    table.add("**total**", *(f"**${totals[key]:,.2f}**" for key in columns), "public networking")
    for rate in RATES:
        fleet, measured = fleets[("recommended", rate)], runs[rate].measured
        extra = cost_model.private_lines(fleet, measured, 2, INTERFACE_ENDPOINTS)
        single = cost_model.private_lines(fleet, measured, 1, INTERFACE_ENDPOINTS)
        table.notes.append(
            f"Private networking, recommended @ {rate:g} msg/s: "
            + "; ".join(f"{line.item} ${line.dollars:,.2f} ({line.source})" for line in extra)
            + f": +${sum(line.dollars for line in extra):,.2f} with two NAT gateways,"
            f" +${sum(line.dollars for line in single):,.2f} with one."
        )
    for rate, goal in GOALS.items():
        total = totals[("recommended", rate)]
        verdict = "met" if total <= goal else "not met"
        table.notes.append(
            f"Goal, recommended @ {rate:g} msg/s, public: ≤ ${goal:g}: ${total:,.2f} ({verdict})."
        )
    table.notes += [
        "DynamoDB, the seed design (per-stream leases, 3 write units a renewal):"
        f" ${seed_dollars:,.2f} a month per 1,000 streams; sessions' units from {dynamo_source}:"
        f" {dynamo.write_fixed:,.0f} + {dynamo.write_per_stream:,.1f} × streams write units and"
        f" {dynamo.read_fixed:,.0f} + {dynamo.read_per_stream:,.1f} × streams read units per"
        " worker-hour.",
        "Recommended: arm64 tasks of 0.25 vCPU / 0.5 GB, capacity by the sizing rule of"
        f" bench/cost_model.py (≤ {cost_model.CPU_BUDGET:.0%} of the vCPU and"
        f" ≤ {cost_model.MEMORY_BUDGET:.0%} of the memory at capacity, from the measured"
        " worker CPU and memory per stream), scaling target 70 %, at least 2 tasks; aggregated"
        f" records into a provisioned stream of shards at ≤ {cost_model.SHARD_BUDGET:.0%} of"
        " 1 MB/s; Container Insights off (streamlease:containerInsights=false: scaling and the"
        " Headroom alarm count the auditor's live workers). Today's defaults: x86 0.5 vCPU /"
        " 1 GB, 100 streams a task (70 at target), a JSON record per message into an on-demand"
        " stream, Container Insights on.",
        "Fargate, today: the worker CPU figures do not change the task count (the capacity"
        f" setting does). CloudWatch: the worker's and the auditor's metrics ({cloudwatch[0]}),"
        " plus Container Insights'"
        f" ({cost_model.CONTAINER_INSIGHTS_METRICS}) where it is on, {cloudwatch[1]} alarms,"
        " one dashboard;"
        " logs measured per worker (JSON logs + EMF), ingested and stored a month.",
        f"Prices: bench/prices.py ({p.REGION}, {p.CHECKED}); not confirmed to the cent: "
        + "; ".join(p.UNCONFIRMED)
        + ".",
    ]
    return table


def sink_table(runs: dict[float, SinkRun], streams: int) -> Table:
    """Aggregation: records and bytes per message, latency, and what feeds the sizing."""
    table = Table(
        f"Cost inputs: one worker, {streams:,} streams, kinesis sink aggregated into"
        f" {SHARDS} shards (local moto)",
        [
            "rate",
            "messages",
            "Kinesis records / message",
            "bytes / message (payload)",
            "JSON record bytes / message (aggregation off)",
            "receive → stored p50 / p99 ms",
            "worker CPU: µs per stream-second, % of a core with none",
            "memory per stream",
            "log bytes / worker-second",
            "recommended capacity (0.25 vCPU / 0.5 GB)",
        ],
    )
    for rate, run in runs.items():
        m = run.measured
        lat = sorted(run.latency_ms)
        table.add(
            f"{rate:g} msg/s",
            run.messages,
            m.records_per_message,
            f"{m.bytes_per_message:,.0f} ({m.payload_bytes:,.0f})",
            m.json_bytes_per_message,
            f"{lat[len(lat) // 2]:,.0f} / {lat[min(len(lat) - 1, int(len(lat) * 0.99))]:,.0f}",
            f"{m.cpu_per_stream * 1e6:,.1f}, {100 * m.cpu_per_worker:.1f} %",
            f"{m.memory_per_stream / 1024:,.0f} KiB",
            m.log_bytes_per_worker_second,
            cost_model.capacity_for(m, 0.25, 0.5),
        )
    ten = runs.get(10.0)
    if ten is not None:
        m = ten.measured
        overhead = m.bytes_per_message - m.payload_bytes
        json_overhead = m.json_bytes_per_message - m.payload_bytes
        table.notes.append(
            f"Goals at 10 msg/s, aggregation on: ≤ {RECORDS_PER_MESSAGE_GOAL} records per"
            f" message: {m.records_per_message:.4f}"
            f" ({'met' if m.records_per_message <= RECORDS_PER_MESSAGE_GOAL else 'not met'});"
            f" ≤ payload + {OVERHEAD_GOAL_BYTES} bytes per message: payload +"
            f" {overhead:,.1f} ({'met' if overhead <= OVERHEAD_GOAL_BYTES else 'not met'})."
            f" Aggregation off: 1 record and payload + {json_overhead:,.0f} bytes per message."
        )
    table.notes += [
        "Receive → stored: Kinesis's arrival time of the record minus the worker's receive time"
        " of each message in it: the holder's batch, the sink's 20 ms linger, a PutRecords call"
        " in flight ahead of it, and the call itself against the local moto server.",
        "Worker CPU: per stream-second (its idle cost and its messages) over what the same"
        " worker spends holding no stream (measured first); memory is resident-set growth from"
        " 0 to N streams / N. Log bytes: stdout + stderr in the steady window (acquisitions"
        " log once, at the ramp, before it): the lines other than a metrics flush as measured,"
        " plus one flush per production interval"
        f" ({Settings().metrics_flush_seconds:g} s) at its largest: the summary line as"
        f" measured and an EMF document of {MAX_EMF_VALUES} samples per latency metric"
        f" ({largest_flush_emf_bytes():,} B).",
    ]
    return table
