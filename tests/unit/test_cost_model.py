"""The bill's arithmetic: the sizing rule, the shard rule and a line of each kind."""

from __future__ import annotations

import pytest

from bench import cost_model
from bench import prices as p
from bench.cost_model import DynamoCost, Fleet, Measured

TEN = Measured(
    rate=10.0,
    cpu_per_stream=606e-6,
    cpu_per_worker=0.004,
    memory_per_stream=25 * 1024,
    records_per_message=0.02,
    bytes_per_message=230.0,
    json_bytes_per_message=370.0,
    payload_bytes=198.0,
    log_bytes_per_worker_second=50.0,
    segments_out_per_message=1.015,
    wire_out_bytes_per_message=52.8,
    wire_in_bytes_per_message=260.0,
)
NO_DYNAMO = DynamoCost(0, 0, 0, 0)


def test_memory_bounds_capacity_when_it_is_the_scarcer() -> None:
    heavy = Measured(**{**TEN.__dict__, "cpu_per_stream": 1e-6, "memory_per_stream": 1024 * 1024})
    assert cost_model.capacity_for(heavy, 0.25, 0.5) == 250  # 256 MiB / 1 MiB, down to 50s


def test_shards_plan_for_seventy_percent_of_a_megabyte_a_second() -> None:
    """1,000 × 10 msg/s × 230 B = 2.2 MiB/s: four shards at 0.7 MiB/s each."""
    assert cost_model.shards_for(TEN) == 4


def test_a_json_record_per_message_on_demand_is_billed_a_kilobyte_each() -> None:
    fleet = Fleet("t", 0.5, 1.0, arm64=False, capacity=100, aggregation=False)
    (kinesis,) = [
        line
        for line in cost_model.bill(fleet, TEN, NO_DYNAMO, (0, 0, 0))
        if "on-demand)" in line.item
    ]
    messages = 1000 * 10 * cost_model.SECONDS_PER_MONTH
    expected = 0.04 * 730 + messages * 1024 / p.GIB * 0.08
    assert kinesis.dollars == pytest.approx(expected)


def test_fleet_runs_at_least_min_tasks_and_enough_for_the_target() -> None:
    fleet = Fleet("r", 0.25, 0.5, arm64=True, capacity=150)
    assert fleet.tasks(1000) == 10  # 105 a task at 70 %
    assert fleet.tasks(100) == 2


def test_container_insights_bills_its_metrics_only_where_it_is_on() -> None:
    """Off (the recommended configuration), the CloudWatch line drops Container Insights' 30
    metrics and nothing else."""

    def cloudwatch(fleet: Fleet) -> float:
        (line,) = [
            x for x in cost_model.bill(fleet, TEN, NO_DYNAMO, (31, 12, 1)) if x.item == "CloudWatch"
        ]
        return line.dollars

    on = Fleet("r", 0.25, 0.5, arm64=True, capacity=150)
    off = Fleet("r", 0.25, 0.5, arm64=True, capacity=150, container_insights=False)
    saved = cost_model.CONTAINER_INSIGHTS_METRICS * p.CUSTOM_METRIC_MONTH
    assert cloudwatch(on) - cloudwatch(off) == pytest.approx(saved)
    assert saved == pytest.approx(9.0)


def test_the_consumers_state_is_billed_per_shard_write_and_read_per_window() -> None:
    """Four shards' items of 1.7 KB (2 write units, 1 read unit each), committed every 5 s:
    8 write and 4 read units a round for 1,000 streams × 10 msg/s × 5 s = 50,000 messages."""
    state = cost_model.consumer_state([1700, 1700, 1750, 1626], 10.0, 5.0)
    rounds = cost_model.SECONDS_PER_MONTH / 5
    assert state.write_units_per_message == pytest.approx(8 / 50_000)
    assert state.read_units_per_message == pytest.approx(4 / 50_000)
    expected = rounds * (8 * p.DYNAMODB_WRITE_MILLION + 4 * p.DYNAMODB_READ_MILLION) / 1e6
    assert state.dollars == pytest.approx(expected)
    assert state.dollars == pytest.approx(2.89, abs=0.01)


def test_a_deployed_shard_count_overrides_the_measured_sizing() -> None:
    fleet = Fleet("r", 0.25, 0.5, arm64=True, capacity=250, provisioned_sink=True, sink_shards=6)
    (kinesis,) = [
        x for x in cost_model.bill(fleet, TEN, NO_DYNAMO, (0, 0, 0)) if "Kinesis" in x.item
    ]
    assert kinesis.source.startswith("6 shards")


def test_nat_gateways_carry_both_directions_with_framing_and_tls() -> None:
    """In: the frame with its TCP/IP headers and TLS's 22 B; out: the acknowledgements."""
    fleet = Fleet("r", 0.25, 0.5, arm64=True, capacity=250)
    (nat, *_) = cost_model.private_lines(fleet, TEN, 1, 6)
    messages = 1000 * 10 * cost_model.SECONDS_PER_MONTH
    gb = messages * (260.0 + cost_model.TLS_RECORD_BYTES + 52.8) / p.GIB
    assert nat.dollars == pytest.approx(p.NAT_GATEWAY_HOUR * 730 + gb * p.NAT_GATEWAY_GB)
