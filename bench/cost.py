"""Cost: what 1,000 held streams cost a month, every line, from what this run measures.

Measured here, at 1 and at 10 messages/s per stream and at each payload size: one ``python -m
worker`` (sessions, our timers) holds N streams (1,000; ``--quick``: 100) of the upstream
simulator and writes to the ``kinesis`` sink, aggregation on, on the local moto server, into a
stream of four shards (an on-demand stream's first size). Over a steady window: the worker's CPU
(``/proc``), its memory growth per held stream, the bytes it writes to stdout and stderr (its
JSON logs and EMF metrics: what CloudWatch Logs ingests, priced at production's flush interval);
then every Kinesis record of the window is read back and deaggregated: records and bytes per
message, and each message's time from the worker receiving it to Kinesis storing it (the sink's
added latency). The JSON record each message would be with aggregation off is encoded from the
same messages. DynamoDB request units per worker-hour come from the write-cost section (this
run's, or measured here at two sizes) as a line ``fixed + per stream × streams``. A third table
prices the consumer's watermarks (:mod:`bench.consumer_cost`) on the shards sized from those
runs.

Each run is at one payload size (:data:`PAYLOADS`, the simulator's ``pad``) and also reads the
kernel's counters of the worker's upstream sockets (:mod:`bench.cost_sockets`): segments and
bytes sent and received per message, the data transfer out and the NAT gateway's bytes.

:mod:`bench.cost_bill` turns that into the bill of each preset (:mod:`cdk.presets`, the deployed
default first), each counted from its synthesized templates (:mod:`bench.cost_template`), with
:mod:`bench.prices`; the tables go to ``bench/results/cost.md``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import statistics
import subprocess
import time
import uuid
from dataclasses import dataclass
from typing import Any, Final

from bench import (
    consumer_cost,
    cost_bill,
    cost_model,
    cost_sockets,
    cost_template,
    upstream_throughput,
    worker_scale,
    write_cost,
)
from bench import prices as p
from bench.common import RESULTS_DIR, Table, machine_description, write_results
from bench.context import PER_STREAM, SESSIONS, BenchContext
from bench.cost_logs import largest_flush_emf_bytes, production_log_rate
from bench.cost_model import DynamoCost, Measured
from bench.cost_template import Deployed
from bench.throughput import _rss_kib, _wait_started
from cdk.presets import DEFAULT_PRESET, Preset
from local.upstream_sim import text_message
from local.worker_process import PRODUCTION_LEASE_SECONDS, WorkerProcess, scaled_settings
from streamlease import aws
from streamlease.kinesis_records import StreamMessage, read_record
from streamlease.settings import Settings
from worker.metrics import MAX_EMF_VALUES
from worker.os_limits import raise_open_file_limit
from worker.sinks import BatchHeader, SinkRecord, encode_record
from worker.sinks.kinesis import partition_key

RATES: Final = (1.0, 10.0)
PAYLOADS: Final = (200, 60, 1024)
"""Message sizes (bytes) measured at each rate; the bill is priced at the first."""
SHARDS: Final = 4
RAMP_BASE_SECONDS: Final = 60.0
RAMP_SECONDS_PER_STREAM: Final = 0.4
"""How long a run waits for the worker to hold its streams: a loaded machine's bound (1,000
streams at 10 msg/s took longer than 160 s beside other work on two cores)."""
RECORDS_PER_MESSAGE_GOAL: Final = 0.05
OVERHEAD_GOAL_BYTES: Final = 40
INTERFACE_ENDPOINTS: Final = 6


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
    payloads: tuple[int, ...] = PAYLOADS
    """Message sizes measured (bytes), the priced one first."""


FULL: Final = Size(1000, 30.0, payloads=(PAYLOADS[0],))
"""1,000 streams at 200 B: two-core machines shared with other work could not hold 1,000 streams
at 10 msg/s of other sizes beside moto (the ramp or a moto call timed out); ``--quick`` measures
every size at 100 streams."""
QUICK: Final = Size(100, 10.0)


def pad_for(payload: int, stream_id: str) -> int:
    """The simulator's ``pad`` that makes ``stream_id``'s messages ``payload`` bytes long (the
    bare message is ~60 B; smaller sizes get no pad)."""
    bare = len(text_message(stream_id, 100_000, int(time.time() * 1000)))
    return max(0, payload - bare)


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
    payload: int = PAYLOADS[0],
) -> SinkRun:
    """One worker holding ``streams`` at ``rate`` msg/s of ``payload``-byte messages into an
    aggregating Kinesis sink, flushing its metrics every ``flush_seconds`` (the windows end on
    flushes), at production's timers or at ``timer_scale`` of them."""
    name = f"cost{rate:g}-{payload}"
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
        pad = pad_for(payload, ids[0])
        worker_scale.seed(
            settings, ids, lambda s: f"ws://127.0.0.1:{port}/{s}?rate={rate:g}&pad={pad}"
        )
        ctx.progress.update(
            f"{streams} streams at {rate:g} msg/s of {payload} B, kinesis sink", force=True
        )
        window = worker_scale.measure(
            worker,
            streams,
            seconds,
            settle_seconds=flush_seconds,
            ramp_timeout_seconds=RAMP_BASE_SECONDS + streams * RAMP_SECONDS_PER_STREAM,
        )
        end_ms = int(time.time() * 1000)
        rss_full = _rss_kib(worker.pid)
        wire = cost_sockets.measure_wire(worker, port)
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
        segments_out_per_message=wire.segments_out,
        wire_out_bytes_per_message=wire.bytes_out,
        wire_in_bytes_per_message=wire.bytes_in,
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


def run(ctx: BenchContext, size: Size | None = None) -> list[Table]:
    """The cost section: measure at each rate and payload size, count what each preset
    deploys, price every line, and write ``bench/results/cost.md`` (``--quick``:
    ``cost-quick.md``). ``size``: :data:`QUICK` with ``--quick``, else :data:`FULL`."""
    size = size or (QUICK if ctx.quick else FULL)
    raise_open_file_limit()
    runs: dict[tuple[float, int], SinkRun] = {}
    failed: list[str] = []
    with upstream_throughput.simulator_process() as (port, _):
        for payload in size.payloads:
            for rate in RATES:
                try:
                    runs[(rate, payload)] = sink_run(
                        ctx,
                        port,
                        size.streams,
                        rate,
                        size.seconds,
                        size.flush_seconds,
                        size.timer_scale,
                        payload,
                    )
                except Exception as exc:  # an extra size must not sink the bill
                    if payload == cost_bill.PRICED_PAYLOAD:
                        raise  # the bill's own figures: the section fails
                    failed.append(f"{rate:g} msg/s of {payload} B: {str(exc).splitlines()[0]}")
    dynamo, seed_dollars, dynamo_source = dynamo_cost(ctx, size)
    measured = {key: r.measured for key, r in runs.items()}
    priced = {rate: runs[(rate, cost_bill.PRICED_PAYLOAD)] for rate in RATES}
    sizing = cost_model.sizing({rate: r.measured for rate, r in priced.items()})
    ctx.progress.update("synthesizing each preset as this run sizes it", force=True)
    deployed = {preset: cost_template.deployed_as_sized(preset, sizing) for preset in Preset}
    bill = cost_bill.bill_table(deployed, measured, dynamo, size.streams, RATES)
    bill.notes += private_notes(deployed[DEFAULT_PRESET], priced, cost_model.STREAMS)
    bill.notes += [
        "DynamoDB, the seed design (per-stream leases, 3 write units a renewal):"
        f" ${seed_dollars:,.2f} a month per 1,000 streams; sessions' units from {dynamo_source}:"
        f" {dynamo.write_fixed:,.0f} + {dynamo.write_per_stream:,.1f} × streams write units and"
        f" {dynamo.read_fixed:,.0f} + {dynamo.read_per_stream:,.1f} × streams read units per"
        " worker-hour.",
        f"Prices: bench/prices.py ({p.REGION}, {p.CHECKED}); not confirmed to the cent: "
        + "; ".join(p.UNCONFIRMED)
        + ".",
    ]
    consumer = consumer_cost.table(
        ctx,
        {rate: cost_model.shards_for(r.measured) for rate, r in priced.items()},
        {rate: r.measured.bytes_per_message for rate, r in priced.items()},
    )
    by_payload = cost_bill.payload_table(deployed, measured, dynamo, cost_model.STREAMS)
    by_payload.notes += [f"Not measured in this run: {failure}." for failure in failed]
    tables = [
        bill,
        by_payload,
        sink_table(runs, size.streams),
        consumer,
    ]
    out = RESULTS_DIR / ("cost-quick.md" if ctx.quick else "cost.md")
    write_results(out, results_header(size), tables)
    if size is FULL:
        sizing["measured_by"] = results_header(size)[2]
        SIZING_FILE.write_text(json.dumps(sizing, indent=2) + "\n")
    return tables


SIZING_FILE: Final = RESULTS_DIR / "capacity.json"
"""What the presets are held to (``cdk/presets.py``): a full run's sizing of one task by rate."""


def results_header(size: Size) -> list[str]:
    """What ``cost.md`` opens with: the command, revision, date, machine and inputs."""
    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return [
        "# What streamlease costs",
        "",
        f"`python -m bench --only cost{' --quick' if size is QUICK else ''}` (part of"
        f" `make bench`) at revision {revision or 'unknown'},"
        f" {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        *[f"- {line}" for line in machine_description()],
        f"- Inputs: {size.streams:,} streams on one worker at {', '.join(f'{r:g}' for r in RATES)}"
        f" msg/s a stream, payloads of {', '.join(f'{b} B' for b in size.payloads)}; windows of"
        f" {size.seconds:g} s; the upstream simulator and moto on this machine; every"
        " configuration counted from its synthesized templates.",
    ]


def private_notes(deployed: Deployed, runs: dict[float, SinkRun], streams: int) -> list[str]:
    """What private networking adds to the deployed default at each rate."""
    fleet = cost_bill.fleet_of(deployed)
    notes = []
    for rate, r in runs.items():
        extra = cost_model.private_lines(fleet, r.measured, 2, INTERFACE_ENDPOINTS, streams)
        single = cost_model.private_lines(fleet, r.measured, 1, INTERFACE_ENDPOINTS, streams)
        notes.append(
            f"Private networking, deployed default @ {rate:g} msg/s: "
            + "; ".join(f"{line.item} ${line.dollars:,.2f} ({line.source})" for line in extra)
            + f": +${sum(line.dollars for line in extra):,.2f} with two NAT gateways,"
            f" +${sum(line.dollars for line in single):,.2f} with one (and no data transfer"
            " out line: the NAT gateway's bytes replace it)."
        )
    return notes


def sink_table(runs: dict[tuple[float, int], SinkRun], streams: int) -> Table:
    """Aggregation: records and bytes per message, latency, the wire, and what feeds the
    sizing."""
    table = Table(
        f"Cost inputs: one worker, {streams:,} streams, kinesis sink aggregated into"
        f" {SHARDS} shards (local moto)",
        [
            "rate, payload",
            "messages",
            "Kinesis records / message",
            "bytes / message (payload)",
            "JSON record bytes / message (aggregation off)",
            "receive → stored p50 / p99 ms",
            "worker CPU: µs per stream-second, % of a core with none",
            "memory per stream",
            "log bytes / worker-second",
            "upstream sockets per message: segments / bytes out, bytes in",
            "capacity by the rule (0.25 vCPU / 0.5 GB)",
        ],
    )
    for (rate, payload), run in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        m = run.measured
        lat = sorted(run.latency_ms)
        table.add(
            f"{rate:g} msg/s, {payload} B",
            run.messages,
            m.records_per_message,
            f"{m.bytes_per_message:,.0f} ({m.payload_bytes:,.0f})",
            m.json_bytes_per_message,
            f"{lat[len(lat) // 2]:,.0f} / {lat[min(len(lat) - 1, int(len(lat) * 0.99))]:,.0f}",
            f"{m.cpu_per_stream * 1e6:,.1f}, {100 * m.cpu_per_worker:.1f} %",
            f"{m.memory_per_stream / 1024:,.0f} KiB",
            m.log_bytes_per_worker_second,
            f"{m.segments_out_per_message:.3f} / {m.wire_out_bytes_per_message:,.0f} B,"
            f" {m.wire_in_bytes_per_message:,.0f} B",
            cost_model.capacity_for(m, 0.25, 0.5),
        )
    ten = runs.get((10.0, PAYLOADS[0]))
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
        "Upstream sockets: the kernel's counters (`ss -ti`: segs_out, bytes_sent, segs_in,"
        " bytes_received) of the worker's connections to the upstream over three metrics"
        f" flushes, each segment with {cost_sockets.HEADER_BYTES} B of IP and TCP headers:"
        " what leaves is nearly all acknowledgements (data transfer out); what comes in is the"
        " WebSocket frames (without the TLS of wss://). Loopback, so the kernel's delayed"
        " acknowledgements behave as on a short path.",
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
