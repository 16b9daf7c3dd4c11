"""The bill counts what deploys: alarms and their metrics from a template, the kernel's socket
counters summed per connection, and the lines priced from those counts."""

from __future__ import annotations

from typing import Any

import pytest

from bench import cost_bill, cost_lines, cost_model
from bench import prices as p
from bench.cost_model import DynamoCost, Measured
from bench.cost_sockets import parse_ss
from bench.cost_template import count
from cdk.config import DeploymentConfig

SS_OUTPUT = """\
0 0 10.0.0.5:40000 203.0.113.7:443
\t cubic wscale:7,7 rto:204 rtt:0.5/0.25 mss:1448 bytes_sent:120 bytes_acked:120 \
bytes_received:9000 segs_out:40 segs_in:60 data_segs_out:2 data_segs_in:58 send 1Mbps
0 0 10.0.0.5:40002 203.0.113.7:443
\t cubic wscale:7,7 rto:204 rtt:0.5/0.25 mss:1448 bytes_received:300 segs_out:3 segs_in:4
"""


def test_socket_counters_are_summed_over_connections_and_absent_ones_count_zero() -> None:
    counters = parse_ss(SS_OUTPUT)
    assert counters.connections == 2
    assert (counters.segs_out, counters.bytes_sent) == (43, 120)
    assert (counters.segs_in, counters.bytes_received) == (64, 9300)


def _alarm(metrics: int | None) -> dict[str, Any]:
    if metrics is None:
        return {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors"}}
    stats = [{"Id": f"m{i}", "MetricStat": {}} for i in range(metrics)]
    return {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {"Metrics": [*stats, {"Id": "e", "Expression": "m0 + m1"}]},
    }


TEMPLATE: dict[str, Any] = {
    "Resources": {
        "A": _alarm(None),
        "B": _alarm(2),
        "Policy": {
            "Type": "AWS::ApplicationAutoScaling::ScalingPolicy",
            "Properties": {
                "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": {
                    "CustomizedMetricSpecification": {
                        "Metrics": [{"Id": "w", "MetricStat": {}}, {"Id": "t", "MetricStat": {}}]
                    }
                },
            },
        },
        "Stage": {
            "Type": "AWS::ApiGateway::Stage",
            "Properties": {"MethodSettings": [{"MetricsEnabled": True}]},
        },
        "Get": {"Type": "AWS::ApiGateway::Method", "Properties": {"HttpMethod": "GET"}},
        "Options": {"Type": "AWS::ApiGateway::Method", "Properties": {"HttpMethod": "OPTIONS"}},
        "Audit": {
            "Type": "AWS::Events::Rule",
            "Properties": {"ScheduleExpression": "rate(5 minutes)", "Targets": [{"Id": "f"}]},
        },
        "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {}},
    }
}


def test_alarms_count_target_trackings_two_and_are_billed_per_metric() -> None:
    """Two alarms in the template (one metric, two metrics in an expression) and the high and
    low alarms of a target-tracking policy on two metrics: 4 alarms on 7 metrics."""
    deployed = count(DeploymentConfig(), [TEMPLATE])
    assert (deployed.alarms, deployed.alarm_metrics) == (4, 7)


def test_method_metrics_schedules_and_retention_are_counted() -> None:
    deployed = count(DeploymentConfig(), [TEMPLATE])
    assert deployed.api_method_metrics == 5  # one method (OPTIONS aside) × 5 detailed metrics
    assert deployed.scheduled_invocations_per_month == pytest.approx(730 * 12)
    assert (deployed.log_groups, deployed.log_groups_without_retention) == (1, 1)


def test_data_transfer_out_is_the_acknowledgements_bytes_per_message() -> None:
    """1,000 streams × 1 msg/s × 60 B a message out, at the internet rate."""
    measured = Measured(
        rate=1.0,
        cpu_per_stream=1e-4,
        cpu_per_worker=0.004,
        memory_per_stream=30_000,
        records_per_message=0.1,
        bytes_per_message=250,
        json_bytes_per_message=400,
        payload_bytes=200,
        log_bytes_per_worker_second=100,
        segments_out_per_message=1.15,
        wire_out_bytes_per_message=60.0,
        wire_in_bytes_per_message=300.0,
    )
    deployed = count(DeploymentConfig(), [TEMPLATE])
    lines = {line.item: line for line in cost_lines.deployed_lines(deployed, measured, 2, 1, 1000)}
    out_gb = 1000 * cost_model.SECONDS_PER_MONTH * 60.0 / p.GIB
    dto = lines["data transfer out (to upstreams)"]
    assert dto.dollars == pytest.approx(out_gb * p.DATA_TRANSFER_OUT_GB)
    assert "1.150 segments" in dto.source
    assert lines["SQS"].dollars == pytest.approx(
        2 * cost_model.SECONDS_PER_MONTH / 20 * p.SQS_REQUESTS_MILLION / 1e6
    )


def _measured_at_ten(cpu_share_at_capacity: float, bytes_per_message: float) -> Measured:
    """A measurement at 10 msg/s whose CPU at the default configuration's capacity is
    ``cpu_share_at_capacity`` of its vCPU."""
    config = DeploymentConfig()
    cpu_per_worker = 0.004
    vcpu = config.worker_cpu / 1024
    return Measured(
        rate=10.0,
        cpu_per_stream=(cpu_share_at_capacity * vcpu - cpu_per_worker) / config.capacity_per_worker,
        cpu_per_worker=cpu_per_worker,
        memory_per_stream=30_000,
        records_per_message=0.01,
        bytes_per_message=bytes_per_message,
        json_bytes_per_message=bytes_per_message + 160,
        payload_bytes=200,
        log_bytes_per_worker_second=100,
    )


def _priced(measured: Measured) -> cost_bill.Priced:
    deployed = count(DeploymentConfig(), [TEMPLATE])
    return cost_bill.price(deployed, measured, DynamoCost(0, 0, 0, 0), cost_model.STREAMS)


def test_a_cost_goal_is_not_met_by_a_configuration_that_cannot_carry_the_load() -> None:
    """The deployed default at 10 msg/s needing 172 % of its vCPU and 4 shards where it deploys
    1: however cheap, the goal is not met, and the verdict says both reasons."""
    result = _priced(_measured_at_ten(1.72, bytes_per_message=250))
    assert (result.shards_needed, result.deployed_shards) == (4, 1)
    assert result.cpu_share_at_capacity == pytest.approx(1.72)
    verdict = cost_bill.goal_verdict(result, result.total, goal=result.total + 1_000)
    assert verdict.startswith("not met")
    assert "172% of the task's vCPU" in verdict
    assert "4 shards needed, 1 deployed" in verdict


def test_a_cost_goal_is_met_by_a_configuration_that_fits_within_the_goal() -> None:
    """Within the CPU budget and the deployed shard: met at or under the goal, not over it."""
    result = _priced(_measured_at_ten(cost_model.CPU_BUDGET * 0.9, bytes_per_message=30))
    assert (result.cpu_fits, result.shards_fit) == (True, True)
    assert cost_bill.goal_verdict(result, result.total, goal=result.total) == "met"
    over = cost_bill.goal_verdict(result, result.total, goal=result.total - 10)
    assert over == "not met: $10.00 over"


def test_an_on_demand_sink_has_the_shards_it_needs() -> None:
    """An on-demand stream scales itself: only the CPU budget decides whether it fits."""
    fits = cost_bill.Priced([], 2, cost_model.CPU_BUDGET, 40, deployed_shards=None)
    assert cost_bill.goal_verdict(fits, 50.0, 60.0) == "met"
