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
"""Fargate Spot moves with supply (50-70 % off)."""
FARGATE_SPOT_ARM_VCPU_HOUR: Final = 0.01034
FARGATE_SPOT_ARM_GB_HOUR: Final = 0.00114
"""Fargate Spot runs arm64 tasks on platform version 1.4.0 and later (the ECS API reference,
CapacityProviderStrategyItem); older guides say x86_64 only."""
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

# --- data transfer, Lambda, X-Ray, SQS, KMS, API Gateway, vended logs ---
DATA_TRANSFER_OUT_GB: Final = 0.09
"""To the internet, first 10 TB a month (the first 100 GB a month of an account are free)."""
DATA_TRANSFER_OUT_FREE_GB: Final = 100.0
LAMBDA_ARM_GB_SECOND: Final = 0.0000133334
LAMBDA_REQUESTS_MILLION: Final = 0.20
XRAY_TRACES_MILLION: Final = 5.00
"""Traces recorded (the first 100,000 a month of an account are free)."""
SQS_REQUESTS_MILLION: Final = 0.40
KMS_REQUESTS_10K: Final = 0.03
API_GATEWAY_REST_MILLION: Final = 3.50
VENDED_LOGS_INGEST_GB: Final = 0.50
"""VPC flow logs delivered to CloudWatch Logs, first 10 TB."""

SOURCES: Final = {
    "Fargate": "aws.amazon.com/fargate/pricing (Linux x86 and ARM per vCPU- and GB-hour)",
    "Fargate Spot": "aws.amazon.com/fargate/pricing, current Spot price table (varies)",
    "public IPv4": "aws.amazon.com/vpc/pricing (public IPv4 address per hour)",
    "Kinesis": "aws.amazon.com/kinesis/data-streams/pricing (on-demand and provisioned)",
    "DynamoDB": "aws.amazon.com/dynamodb/pricing/on-demand",
    "CloudWatch": "aws.amazon.com/cloudwatch/pricing (metrics, logs, alarms, dashboards)",
    "VPC": "aws.amazon.com/vpc/pricing (NAT gateway, PrivateLink interface endpoints)",
    "data transfer": "aws.amazon.com/ec2/pricing/on-demand (data transfer out to the internet)",
    "Lambda": "aws.amazon.com/lambda/pricing (Arm, per GB-second and per request)",
    "X-Ray": "aws.amazon.com/xray/pricing (traces recorded)",
    "SQS": "aws.amazon.com/sqs/pricing (standard queue requests)",
    "KMS": "aws.amazon.com/kms/pricing (requests)",
    "API Gateway": "aws.amazon.com/api-gateway/pricing (REST API requests)",
}
UNCONFIRMED: Final = (
    "Fargate Spot (moves with supply; the figures are recent x86 and arm64 rates)",
    "public IPv4 address",
    "Kinesis dollar rates (the 1 KB rounding and the 25 KB PUT payload unit are confirmed)",
)
