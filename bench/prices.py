"""The AWS list prices every cost figure of the benchmarks uses, in one place.

Region us-east-1 (N. Virginia), USD, on-demand list prices, checked 2026-12-01 against AWS's
pricing pages and published price tables. :data:`UNCONFIRMED` names the prices that check could
not confirm to the cent; they are the long-standing list prices. Change a price here and every
table follows.
"""

from __future__ import annotations

from typing import Final

REGION: Final = "us-east-1"
CHECKED: Final = "2026-12-01"
HOURS_PER_MONTH: Final = 730.0
GIB: Final = 1024**3

# --- Fargate (Linux), per hour ---
FARGATE_X86_VCPU_HOUR: Final = 0.04048
FARGATE_X86_GB_HOUR: Final = 0.004445
FARGATE_ARM_VCPU_HOUR: Final = 0.03238
FARGATE_ARM_GB_HOUR: Final = 0.00356
FARGATE_SPOT_X86_VCPU_HOUR: Final = 0.01264
FARGATE_SPOT_X86_GB_HOUR: Final = 0.00139
"""Fargate Spot moves with supply (50-70 % off); x86_64 only (Spot runs no arm64 task)."""
PUBLIC_IPV4_HOUR: Final = 0.005
"""Per public IPv4 address: one per task in public networking."""

# --- Kinesis Data Streams ---
KINESIS_ON_DEMAND_STREAM_HOUR: Final = 0.04
KINESIS_ON_DEMAND_INGEST_GB: Final = 0.08
"""Per GB written; each record counts as its size rounded up to the next 1 KB."""
KINESIS_ON_DEMAND_RETRIEVAL_GB: Final = 0.04
"""Per GB read, each consumer (here: one)."""
KINESIS_RECORD_ROUNDING_BYTES: Final = 1024
KINESIS_SHARD_HOUR: Final = 0.015
KINESIS_PUT_UNITS_MILLION: Final = 0.014
"""Provisioned: per million PUT payload units, a unit being each started 25 KB of a record."""
KINESIS_PUT_UNIT_BYTES: Final = 25 * 1024
KINESIS_SHARD_BYTES_PER_SECOND: Final = 1024 * 1024
KINESIS_SHARD_RECORDS_PER_SECOND: Final = 1000

# --- DynamoDB on demand (Standard table class) ---
DYNAMODB_WRITE_MILLION: Final = 0.625
DYNAMODB_READ_MILLION: Final = 0.125

# --- CloudWatch ---
CUSTOM_METRIC_MONTH: Final = 0.30
LOGS_INGEST_GB: Final = 0.50
LOGS_STORAGE_GB_MONTH: Final = 0.03
ALARM_MONTH: Final = 0.10
DASHBOARD_MONTH: Final = 3.00

# --- VPC ---
NAT_GATEWAY_HOUR: Final = 0.045
NAT_GATEWAY_GB: Final = 0.045
INTERFACE_ENDPOINT_AZ_HOUR: Final = 0.01
INTERFACE_ENDPOINT_GB: Final = 0.01

SOURCES: Final = {
    "Fargate": "aws.amazon.com/fargate/pricing (Linux x86 and ARM per vCPU- and GB-hour)",
    "Fargate Spot": "aws.amazon.com/fargate/pricing, current Spot price table (varies)",
    "public IPv4": "aws.amazon.com/vpc/pricing (public IPv4 address per hour)",
    "Kinesis": "aws.amazon.com/kinesis/data-streams/pricing (on-demand and provisioned)",
    "DynamoDB": "aws.amazon.com/dynamodb/pricing/on-demand",
    "CloudWatch": "aws.amazon.com/cloudwatch/pricing (metrics, logs, alarms, dashboards)",
    "VPC": "aws.amazon.com/vpc/pricing (NAT gateway, PrivateLink interface endpoints)",
}
UNCONFIRMED: Final = (
    "Fargate Spot (moves with supply; the figure is a recent x86 rate)",
    "public IPv4 address",
    "Kinesis dollar rates (the 1 KB rounding and the 25 KB PUT payload unit are confirmed)",
)
