"""The bill of what deploys: the deployed default and every preset (:mod:`cdk.presets`), each
counted from its synthesized templates (:mod:`bench.cost_template`) and priced from the cost
section's measurements at each rate and payload size. Pure but for the synth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from bench import cost_model
from bench import prices as p
from bench.common import Table
from bench.cost_lines import deployed_lines
from bench.cost_model import DynamoCost, Fleet, Line, Measured
from bench.cost_template import Deployed
from cdk.config import CpuArchitecture, SinkCapacity
from cdk.presets import DEFAULT_PRESET, Preset
from streamlease.telemetry import AuditorMetric, WorkerMetric

DTO_LINE: Final = "data transfer out (to upstreams)"
GOALS: Final = {1.0: (60.0, True), 10.0: (100.0, False)}
"""Deployed default, 200 B payloads, public networking: rate → ($ a month per 1,000 streams,
whether data transfer out counts toward it)."""
PRICED_PAYLOAD: Final = 200


def fleet_of(deployed: Deployed) -> Fleet:
    """The cost model's fleet for what a configuration deploys."""
    c = deployed.config
    provisioned = c.sink_capacity is SinkCapacity.PROVISIONED
    return Fleet(
        str(c.capacity_per_worker),
        c.worker_cpu / 1024,
        c.worker_memory_mib / 1024,
        arm64=c.worker_architecture is CpuArchitecture.ARM64,
        capacity=c.capacity_per_worker,
        target=c.target_load_fraction,
        min_tasks=c.min_tasks,
        provisioned_sink=provisioned,
        container_insights=c.container_insights,
        sink_shards=c.sink_shards if provisioned else None,
    )


def published_metrics() -> int:
    """Custom metrics the workers and the auditor publish every flush (one each: no per-task
    dimension); the API's and the reaper's only in hours something happens."""
    return sum(
        1
        for kind in (WorkerMetric, AuditorMetric)
        for k, v in vars(kind).items()
        if not k.startswith("_") and isinstance(v, str)
    )


@dataclass(frozen=True)
class Priced:
    """One configuration at one rate and payload: its lines and what the measurement says of
    its sizing."""

    lines: list[Line]
    tasks: int
    cpu_share_at_capacity: float
    """The streams' measured CPU at the configured capacity, as a share of the task's vCPU
    (the sizing rule allows ``cost_model.CPU_BUDGET``)."""
    shards_needed: int
    """Shards the measured bytes need by the sizing rule (``cost_model.shards_for``)."""
    deployed_shards: int | None
    """Shards the configuration deploys; ``None`` for an on-demand sink, which scales itself."""

    @property
    def cpu_fits(self) -> bool:
        return self.cpu_share_at_capacity <= cost_model.CPU_BUDGET

    @property
    def shards_fit(self) -> bool:
        return self.deployed_shards is None or self.shards_needed <= self.deployed_shards

    @property
    def total(self) -> float:
        return sum(line.dollars for line in self.lines)

    @property
    def total_without_transfer(self) -> float:
        return sum(line.dollars for line in self.lines if line.item != DTO_LINE)


def price(deployed: Deployed, measured: Measured, dynamo: DynamoCost, streams: int) -> Priced:
    """Every line of ``deployed`` at ``measured``'s rate and payload, public networking."""
    fleet = fleet_of(deployed)
    tasks = fleet.tasks(streams)
    cloudwatch = (published_metrics(), deployed.alarm_metrics, deployed.dashboards)
    lines = cost_model.bill(fleet, measured, dynamo, cloudwatch, streams)
    shards = fleet.sink_shards or cost_model.shards_for(measured, streams)
    lines += deployed_lines(deployed, measured, tasks, shards, streams)
    cpu = measured.cpu_per_worker + measured.cpu_per_stream * fleet.capacity
    needed = cost_model.shards_for(measured, streams)
    return Priced(lines, tasks, cpu / fleet.vcpu, needed, fleet.sink_shards)


def goal_verdict(result: Priced, total: float, goal: float) -> str:
    """ "met" only if ``total`` ($ a month) is within ``goal`` and the configuration carries the
    measured load (CPU at capacity within the sizing rule's budget, shards enough for the
    bytes); else "not met" with each reason: a price of a fleet that cannot carry the load
    meets nothing."""
    reasons = []
    if total > goal:
        reasons.append(f"${total - goal:,.2f} over")
    if not result.cpu_fits:
        reasons.append(
            f"CPU at capacity {result.cpu_share_at_capacity:.0%} of the task's vCPU, over the"
            f" {cost_model.CPU_BUDGET:.0%} budget"
        )
    if not result.shards_fit:
        reasons.append(f"{result.shards_needed} shards needed, {result.deployed_shards} deployed")
    return "met" if not reasons else "not met: " + "; ".join(reasons)


def spot_saving(deployed: Deployed, streams: int) -> tuple[int, float]:
    """(tasks on Spot, $ a month saved) with ``streamlease:fargateSpot=true``: ``min_tasks`` run
    on Fargate, the rest half on Fargate Spot (weights 1:1; the fewer half counted), so that a
    reclaim of every Spot task at once leaves most of the fleet (Spot runs arm64 on platform
    1.4.0 and later)."""
    fleet = fleet_of(deployed)
    spot_tasks = max(0, fleet.tasks(streams) - fleet.min_tasks) // 2
    if fleet.arm64:
        on_demand = fleet.vcpu * p.FARGATE_ARM_VCPU_HOUR + fleet.memory_gb * p.FARGATE_ARM_GB_HOUR
        spot = (
            fleet.vcpu * p.FARGATE_SPOT_ARM_VCPU_HOUR + fleet.memory_gb * p.FARGATE_SPOT_ARM_GB_HOUR
        )
    else:
        on_demand = fleet.vcpu * p.FARGATE_X86_VCPU_HOUR + fleet.memory_gb * p.FARGATE_X86_GB_HOUR
        spot = (
            fleet.vcpu * p.FARGATE_SPOT_X86_VCPU_HOUR + fleet.memory_gb * p.FARGATE_SPOT_X86_GB_HOUR
        )
    return spot_tasks, spot_tasks * (on_demand - spot) * p.HOURS_PER_MONTH


def bill_table(
    deployed: Mapping[Preset, Deployed],
    measured: Mapping[tuple[float, int], Measured],
    dynamo: DynamoCost,
    measured_streams: int,
    rates: tuple[float, ...],
    streams: int = cost_model.STREAMS,
) -> Table:
    """Every line of each preset (the deployed default first) at each rate, 200 B payloads, for
    ``streams`` streams (``measured_streams``: how many the measurement held)."""
    columns = [(preset, rate) for preset in deployed for rate in rates]

    def name(preset: Preset) -> str:
        return f"{preset} (deployed default)" if preset == DEFAULT_PRESET else str(preset)

    table = Table(
        f"Bill: $ a month per 1,000 held streams, {PRICED_PAYLOAD} B payloads, public networking"
        f" ({p.REGION} list prices of {p.CHECKED}; measured with {measured_streams:,} streams on"
        " one worker)",
        ["line", *(f"{name(s)} @ {r:g} msg/s" for s, r in columns), f"how ({columns[0][0]} @ 1)"],
    )
    priced = {
        (s, r): price(deployed[s], measured[(r, PRICED_PAYLOAD)], dynamo, streams)
        for s, r in columns
    }
    first = priced[columns[0]]
    for index, line in enumerate(first.lines):
        cells = [f"${priced[key].lines[index].dollars:,.2f}" for key in columns]
        table.add(line.item, *cells, line.source)
    table.add(
        "**total but data transfer out**",
        *(f"**${priced[key].total_without_transfer:,.2f}**" for key in columns),
        "",
    )
    table.add("**total**", *(f"**${priced[key].total:,.2f}**" for key in columns), "")
    for key in columns:
        result = priced[key]
        budget = cost_model.CPU_BUDGET
        verdict = "within" if result.cpu_fits else "OVER"
        shards = "on demand" if result.deployed_shards is None else result.deployed_shards
        table.notes.append(
            f"{key[0]} @ {key[1]:g} msg/s: {result.tasks} tasks; at capacity the streams'"
            f" measured CPU is {result.cpu_share_at_capacity:.0%} of the task's vCPU ({verdict}"
            f" the {budget:.0%} budget); the measured bytes need {result.shards_needed}"
            f" shard(s), {shards} deployed"
            + ("" if result.shards_fit else " (OVER: the stream would throttle)")
            + "."
        )
    for rate, (goal, with_transfer) in GOALS.items():
        if (DEFAULT_PRESET, rate) not in priced:
            continue
        result = priced[(DEFAULT_PRESET, rate)]
        total = result.total if with_transfer else result.total_without_transfer
        what = "every line" if with_transfer else "every line but data transfer out"
        table.notes.append(
            f"Goal, deployed default @ {rate:g} msg/s, {what}: ≤ ${goal:g}: ${total:,.2f}"
            f" ({goal_verdict(result, total, goal)})."
        )
    for preset, d in deployed.items():
        spot_tasks, saved = spot_saving(d, streams)
        table.notes.append(
            f"Fargate Spot (`-c streamlease:fargateSpot=true`: min_tasks on Fargate, the rest half"
            " on Spot),"
            f" {preset}: {spot_tasks} of {fleet_of(d).tasks(streams)} tasks on Spot,"
            f" −${saved:,.2f} a month at Spot's current arm64 rate."
        )
    d = deployed[DEFAULT_PRESET]
    table.notes.append(
        f"Counted from the synthesized templates ({DEFAULT_PRESET}): {d.alarms} alarms on"
        f" {d.alarm_metrics} metrics (target tracking's two included), {d.dashboards}"
        f" dashboard, {d.api_method_metrics} API method metrics, {d.traced_functions} traced"
        f" functions, {d.scheduled_invocations_per_month:,.0f} scheduled invocations a month,"
        f" {d.log_groups} log groups ({d.log_groups_without_retention} without retention);"
        f" {published_metrics()} custom metrics published by the workers and the auditor."
    )
    return table


def payload_table(
    deployed: Mapping[Preset, Deployed],
    measured: Mapping[tuple[float, int], Measured],
    dynamo: DynamoCost,
    streams: int,
) -> Table:
    """Each preset's total at each measured rate and payload size, with its Kinesis line."""
    table = Table(
        "Bill by payload size: $ a month per 1,000 streams, public networking",
        [
            "preset",
            "rate",
            "payload (measured)",
            "Kinesis bytes / message",
            "shards needed / deployed",
            "Kinesis line",
            "data transfer out",
            "total but data transfer out",
        ],
    )
    for preset, d in deployed.items():
        for (rate, size), m in sorted(measured.items()):
            result = price(d, m, dynamo, streams)
            kinesis = sum(line.dollars for line in result.lines if line.item.startswith("Kinesis"))
            dto = sum(line.dollars for line in result.lines if line.item == DTO_LINE)
            needed = result.shards_needed
            deployed_shards = d.config.sink_shards
            at_needed = kinesis + (max(0, needed - deployed_shards)) * p.KINESIS_SHARD_HOUR * 730
            table.add(
                str(preset),
                f"{rate:g} msg/s",
                f"{size} B ({m.payload_bytes:,.0f} B)",
                m.bytes_per_message,
                f"{needed} / {deployed_shards}",
                f"${kinesis:,.2f}"
                + ("" if needed <= deployed_shards else f" (${at_needed:,.2f} at {needed})"),
                f"${dto:,.2f}",
                f"${result.total_without_transfer:,.2f}",
            )
    table.notes.append(
        "Where the measured bytes need more shards than the preset deploys, the Kinesis line in"
        " brackets prices the shards needed (`-c streamlease:sinkShards=N`); the total is at the"
        " deployed shards."
    )
    return table
