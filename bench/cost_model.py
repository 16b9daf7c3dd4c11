"""The monthly bill of 1,000 held streams, line by line, from measured figures and
:mod:`bench.prices`. Pure: the cost section measures, this prices.

Sizing rule (the one the CDK defaults follow): a task holds at most
``capacity = min((vCPU × CPU_BUDGET − CPU per worker) / CPU per stream-second, memory ×
MEMORY_BUDGET / memory per stream, 8,000)``, rounded down to a multiple of 50; scaling keeps
``capacity × target`` streams per task; the fleet runs
``max(min_tasks, ⌈streams / (capacity × target)⌉)`` tasks. A provisioned sink stream gets
``⌈bytes per second / (1 MB/s × SHARD_BUDGET)⌉`` shards.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from bench import prices as p
from streamlease.settings import MAX_CAPACITY

STREAMS: Final = 1000
CPU_BUDGET: Final = 0.5
"""Share of a task's vCPU its streams may use at capacity: a Graviton vCPU is slower than the
bench's core, and reconnect storms, takeovers and garbage collection come on top."""
MEMORY_BUDGET: Final = 0.5
SHARD_BUDGET: Final = 0.7
"""Share of a shard's 1 MB/s a provisioned stream plans to use: hashing spreads streams over
shards unevenly, and a shard refuses what is above its limit."""
SECONDS_PER_MONTH: Final = p.HOURS_PER_MONTH * 3600
TLS_RECORD_BYTES: Final = 22
"""What ``wss://`` adds to a received frame (TLS 1.3 record header, content type and AES-GCM
tag, a record a frame): the bench's upstreams are ``ws://``, production's ``wss://``."""
CONTAINER_INSIGHTS_METRICS: Final = 30
"""Custom metrics Container Insights (standard) bills for one cluster with one service."""


@dataclass(frozen=True)
class Measured:
    """What the cost section measured at one message rate (per stream)."""

    rate: float
    """Messages per second per stream."""
    cpu_per_stream: float
    """Worker CPU seconds per stream-second (its idle cost and its messages together)."""
    cpu_per_worker: float
    """Worker CPU seconds per second with no stream (renewals, fleet and orphan reads)."""
    memory_per_stream: float
    """Worker resident-set bytes per held stream."""
    records_per_message: float
    """Kinesis records per message, aggregated."""
    bytes_per_message: float
    """Kinesis bytes (data + partition key) per message, aggregated."""
    json_bytes_per_message: float
    """Bytes of one JSON Kinesis record per message (aggregation off): data + partition key."""
    payload_bytes: float
    """Upstream payload bytes per message (what crosses a NAT gateway, roughly)."""
    log_bytes_per_worker_second: float
    """Worker stdout + stderr (JSON logs and EMF metrics): CloudWatch Logs ingestion."""
    segments_out_per_message: float = 0.0
    """TCP segments the worker's upstream sockets send per received message (acknowledgements
    mostly), from the kernel's counters."""
    wire_out_bytes_per_message: float = 0.0
    """Bytes those segments put on the wire (payload + IP and TCP headers): data transfer out."""
    wire_in_bytes_per_message: float = 0.0
    """Bytes the worker's upstream sockets receive per message (WebSocket frame + IP and TCP
    headers; no TLS: the bench's upstreams are ``ws://``)."""


@dataclass(frozen=True)
class DynamoCost:
    """Request units per worker-hour at production timers, ``fixed + per_stream × streams``."""

    write_fixed: float
    write_per_stream: float
    read_fixed: float
    read_per_stream: float

    def dollars(self, streams_per_worker: float, workers: float) -> float:
        """$ a month for ``workers`` workers of ``streams_per_worker`` streams each."""
        writes = self.write_fixed + self.write_per_stream * streams_per_worker
        reads = self.read_fixed + self.read_per_stream * streams_per_worker
        per_hour = writes * p.DYNAMODB_WRITE_MILLION / 1e6 + reads * p.DYNAMODB_READ_MILLION / 1e6
        return per_hour * workers * p.HOURS_PER_MONTH


@dataclass(frozen=True)
class Fleet:
    """One configuration of the deployment."""

    name: str
    vcpu: float
    memory_gb: float
    arm64: bool
    capacity: int
    target: float = 0.7
    min_tasks: int = 2
    aggregation: bool = True
    provisioned_sink: bool = False
    container_insights: bool = True
    """Container Insights on the cluster (``streamlease:containerInsights``)."""
    sink_shards: int | None = None
    """Shards of the provisioned sink as deployed; None: sized from the measured bytes."""

    @property
    def streams_per_task(self) -> float:
        """What scaling keeps on a task."""
        return self.capacity * self.target

    def tasks(self, streams: int = STREAMS) -> int:
        """Tasks running for ``streams`` streams."""
        return max(self.min_tasks, math.ceil(streams / self.streams_per_task))


def capacity_for(measured: Measured, vcpu: float, memory_gb: float) -> int:
    """Streams one task of ``vcpu`` and ``memory_gb`` holds by the sizing rule (see the module
    docstring)."""
    by_cpu = max(0.0, vcpu * CPU_BUDGET - measured.cpu_per_worker) / measured.cpu_per_stream
    by_memory = memory_gb * p.GIB * MEMORY_BUDGET / measured.memory_per_stream
    return max(50, int(min(by_cpu, by_memory, MAX_CAPACITY) // 50 * 50))


SIZED_TASK: Final = (0.25, 0.5)
"""vCPU and GB of the task the presets run (``cdk/presets.py``: ``worker_cpu`` 256, 512 MiB)."""


def sizing(measured: Mapping[float, Measured]) -> dict[str, Any]:
    """Each rate's capacity of a :data:`SIZED_TASK` by the rule and its shards for
    :data:`STREAMS` streams, with the figures they rest on: what ``cdk/presets.py`` is held to."""
    vcpu, memory_gb = SIZED_TASK
    rates = {
        f"{rate:g}": {
            "capacity_per_worker": capacity_for(m, vcpu, memory_gb),
            "sink_shards": shards_for(m),
            "cpu_us_per_stream_second": round(m.cpu_per_stream * 1e6, 1),
            "worker_cpu_fraction_with_no_stream": round(m.cpu_per_worker, 4),
            "memory_bytes_per_stream": round(m.memory_per_stream),
            "bytes_per_message": round(m.bytes_per_message, 1),
        }
        for rate, m in sorted(measured.items())
    }
    return {
        "task": {"vcpu": vcpu, "memory_gb": memory_gb},
        "streams": STREAMS,
        "rule": f"CPU within {CPU_BUDGET:.0%} of the task's vCPU and memory within"
        f" {MEMORY_BUDGET:.0%} of its memory, a multiple of 50; shards at {SHARD_BUDGET:.0%} of"
        " 1 MB/s (bench/cost_model.py)",
        "rates": rates,
    }


def shards_for(measured: Measured, streams: int = STREAMS) -> int:
    """Shards of a provisioned sink stream for ``streams`` streams' bytes."""
    per_second = streams * measured.rate * measured.bytes_per_message
    return max(1, math.ceil(per_second / (p.KINESIS_SHARD_BYTES_PER_SECOND * SHARD_BUDGET)))


@dataclass(frozen=True)
class Line:
    """One line of the bill: what, $ a month, and how it was worked out."""

    item: str
    dollars: float
    source: str


def bill(
    fleet: Fleet,
    measured: Measured,
    dynamo: DynamoCost,
    fixed_cloudwatch: tuple[int, int, int],
    streams: int = STREAMS,
) -> list[Line]:
    """Every line of ``fleet``'s bill for ``streams`` streams (public networking).
    ``fixed_cloudwatch``: (custom metrics streamlease publishes, metrics its alarms evaluate,
    dashboards) of the deployment; Container Insights' metrics come on top when ``fleet`` has
    it on."""
    tasks = fleet.tasks(streams)
    vcpu_price = p.FARGATE_ARM_VCPU_HOUR if fleet.arm64 else p.FARGATE_X86_VCPU_HOUR
    gb_price = p.FARGATE_ARM_GB_HOUR if fleet.arm64 else p.FARGATE_X86_GB_HOUR
    hours = p.HOURS_PER_MONTH
    messages = streams * measured.rate * SECONDS_PER_MONTH
    arch = "arm64" if fleet.arm64 else "x86"
    lines = [
        Line(
            "Fargate",
            tasks * (fleet.vcpu * vcpu_price + fleet.memory_gb * gb_price) * hours,
            f"{tasks} tasks of {fleet.vcpu:g} vCPU / {fleet.memory_gb:g} GB {arch}:"
            f" {fleet.capacity:,} streams a task, {fleet.streams_per_task:,.0f} at target",
        ),
        Line("public IPv4", tasks * p.PUBLIC_IPV4_HOUR * hours, f"{tasks} tasks × 1 address"),
        Line(
            "DynamoDB (sessions)",
            dynamo.dollars(streams / tasks, tasks),
            f"measured units per worker-hour at {streams / tasks:,.0f} streams per worker",
        ),
    ]
    lines += _kinesis(fleet, measured, messages, streams)
    metrics, alarms, dashboards = fixed_cloudwatch
    insights = CONTAINER_INSIGHTS_METRICS if fleet.container_insights else 0
    metrics += insights
    log_gb = measured.log_bytes_per_worker_second * tasks * SECONDS_PER_MONTH / p.GIB
    lines.append(
        Line(
            "CloudWatch",
            metrics * p.CUSTOM_METRIC_MONTH
            + alarms * p.ALARM_MONTH
            + dashboards * p.DASHBOARD_MONTH
            + log_gb * (p.LOGS_INGEST_GB + p.LOGS_STORAGE_GB_MONTH),
            f"{metrics} metrics ({insights} Container Insights'), alarms on {alarms} metrics,"
            f" {dashboards} dashboard;"
            f" logs {log_gb:.2f} GB (measured {measured.log_bytes_per_worker_second:,.0f}"
            " B/s per worker)",
        )
    )
    return lines


def _kinesis(fleet: Fleet, measured: Measured, messages: float, streams: int) -> list[Line]:
    hours = p.HOURS_PER_MONTH
    if fleet.aggregation:
        records = messages * measured.records_per_message
        data_bytes = messages * measured.bytes_per_message
        record_bytes = measured.bytes_per_message / measured.records_per_message
        shape = f"{measured.records_per_message:.3f} records/msg, {record_bytes:,.0f} B each"
    else:
        records = messages
        data_bytes = messages * measured.json_bytes_per_message
        record_bytes = measured.json_bytes_per_message
        shape = f"1 record/msg of {record_bytes:,.0f} B"
    if fleet.provisioned_sink:
        shards = shards_for(measured, streams) if fleet.aggregation else _json_shards(messages)
        shards = fleet.sink_shards or shards
        units = records * math.ceil(record_bytes / p.KINESIS_PUT_UNIT_BYTES)
        return [
            Line(
                "Kinesis (provisioned)",
                shards * p.KINESIS_SHARD_HOUR * hours + units / 1e6 * p.KINESIS_PUT_UNITS_MILLION,
                f"{shards} shards; {shape}",
            )
        ]
    billed_kb = math.ceil(record_bytes / p.KINESIS_RECORD_ROUNDING_BYTES)
    ingest_gb = records * billed_kb * 1024 / p.GIB
    return [
        Line(
            "Kinesis (on-demand)",
            p.KINESIS_ON_DEMAND_STREAM_HOUR * hours + ingest_gb * p.KINESIS_ON_DEMAND_INGEST_GB,
            f"{shape}, billed as {billed_kb} KB each: {ingest_gb:,.0f} GB in",
        ),
        Line(
            "Kinesis reads (on-demand, one consumer)",
            data_bytes / p.GIB * p.KINESIS_ON_DEMAND_RETRIEVAL_GB,
            f"{data_bytes / p.GIB:,.0f} GB out",
        ),
    ]


def _json_shards(messages_per_month: float) -> int:
    per_second = messages_per_month / SECONDS_PER_MONTH
    return max(1, math.ceil(per_second / (p.KINESIS_SHARD_RECORDS_PER_SECOND * SHARD_BUDGET)))


def private_lines(
    fleet: Fleet, measured: Measured, nat_gateways: int, endpoints: int, streams: int = STREAMS
) -> list[Line]:
    """What private networking adds: NAT gateways for the upstreams, interface endpoints for
    AWS (two AZs), instead of public IPv4 addresses."""
    hours = p.HOURS_PER_MONTH
    messages = streams * measured.rate * SECONDS_PER_MONTH
    in_bytes = measured.wire_in_bytes_per_message + TLS_RECORD_BYTES
    upstream_gb = messages * (in_bytes + measured.wire_out_bytes_per_message) / p.GIB
    aws_gb = messages * measured.bytes_per_message / p.GIB
    return [
        Line(
            "NAT gateways",
            nat_gateways * p.NAT_GATEWAY_HOUR * hours + upstream_gb * p.NAT_GATEWAY_GB,
            f"{nat_gateways} × hours + {upstream_gb:,.0f} GB both ways: {in_bytes:,.0f} B in"
            f" (frame, TCP/IP and TLS) and {measured.wire_out_bytes_per_message:,.0f} B out"
            " a message",
        ),
        Line(
            "interface endpoints",
            endpoints * 2 * p.INTERFACE_ENDPOINT_AZ_HOUR * hours + aws_gb * p.INTERFACE_ENDPOINT_GB,
            f"{endpoints} endpoints × 2 AZs + {aws_gb:,.0f} GB to Kinesis",
        ),
        Line(
            "no public IPv4",
            -fleet.tasks(streams) * p.PUBLIC_IPV4_HOUR * hours,
            "tasks have private addresses only",
        ),
    ]


# --- the consumer's state (streamlease.consumer) ---------------------------------------------


@dataclass(frozen=True)
class ConsumerState:
    """What the consumer's watermarks cost at one rate: DynamoDB units per message and $ a
    month for ``streams`` streams. Each shard's consumer commits once per batch (one
    ``PutItem`` of the shard's item: 1 write unit per started KB) and, re-opening the shard
    per batch as a Lambda handler must, reads it once (strongly consistent: 1 read unit per
    started 4 KB)."""

    rate: float
    window_seconds: float
    shards: int
    write_units_per_message: float
    read_units_per_message: float
    dollars: float


def consumer_state(
    item_bytes: list[int], rate: float, window_seconds: float, streams: int = STREAMS
) -> ConsumerState:
    """The consumer's state cost when each of ``len(item_bytes)`` shards (its item of that
    many bytes) is committed once per batch of ``window_seconds``."""
    rounds = SECONDS_PER_MONTH / window_seconds
    writes = sum(math.ceil(size / 1024) for size in item_bytes)
    reads = sum(math.ceil(size / 4096) for size in item_bytes)
    messages = streams * rate * window_seconds
    dollars = rounds * (writes * p.DYNAMODB_WRITE_MILLION + reads * p.DYNAMODB_READ_MILLION) / 1e6
    return ConsumerState(
        rate, window_seconds, len(item_bytes), writes / messages, reads / messages, dollars
    )
