"""The bill's lines beyond compute, sink and table: data transfer out, the Lambdas, X-Ray,
SQS, VPC flow logs, KMS and the API's metrics, from what a configuration deploys
(:mod:`bench.cost_template`) and what the cost section measured. Pure.
"""

from __future__ import annotations

from typing import Final

from bench import prices as p
from bench.cost_model import SECONDS_PER_MONTH, Line, Measured
from bench.cost_template import Deployed

AUDIT_SECONDS: Final = 1.0
"""Assumed billed duration of one auditor run (a query of the fleet index and a few metric
puts); not measured here."""
AUDITOR_MEMORY_GB: Final = 0.25
POLL_SECONDS: Final = 20
"""A worker's SQS long poll of the command queue (``poll_wait_seconds``): one request a poll."""
FLOW_AGGREGATION_SECONDS: Final = 600
"""VPC flow logs' default aggregation interval: one record per flow and direction each."""
FLOW_RECORD_BYTES: Final = 130
"""Bytes of one default-format flow log record as CloudWatch Logs ingests it (assumed)."""
AWS_CONNECTIONS_PER_TASK: Final = 6
"""A worker's connections to AWS (DynamoDB, SQS, Kinesis, CloudWatch Logs, ECR, Secrets)."""
KMS_KEY_REUSE_SECONDS: Final = 300
"""Kinesis server-side encryption asks KMS for a data key about every 5 minutes per shard
and principal (the writing tasks, one reader)."""


def deployed_lines(
    deployed: Deployed, measured: Measured, tasks: int, shards: int, streams: int
) -> list[Line]:
    """The lines of :mod:`bench.cost_lines`'s docstring for ``tasks`` tasks holding
    ``streams`` streams at ``measured``'s rate into ``shards`` shards."""
    messages = streams * measured.rate * SECONDS_PER_MONTH
    out_gb = messages * measured.wire_out_bytes_per_message / p.GIB
    invocations = deployed.scheduled_invocations_per_month
    gb_seconds = invocations * AUDIT_SECONDS * AUDITOR_MEMORY_GB
    polls = tasks * SECONDS_PER_MONTH / POLL_SECONDS
    flows = streams + tasks * AWS_CONNECTIONS_PER_TASK
    flow_gb = (
        2 * flows * SECONDS_PER_MONTH / FLOW_AGGREGATION_SECONDS * FLOW_RECORD_BYTES / p.GIB
        if deployed.flow_logs
        else 0.0
    )
    kms = (tasks + 1) * shards * SECONDS_PER_MONTH / KMS_KEY_REUSE_SECONDS
    api_ceiling = deployed.api_method_metrics * p.CUSTOM_METRIC_MONTH
    return [
        Line(
            "data transfer out (to upstreams)",
            out_gb * p.DATA_TRANSFER_OUT_GB,
            f"{measured.segments_out_per_message:.3f} segments,"
            f" {measured.wire_out_bytes_per_message:,.0f} B a message (kernel counters of the"
            f" worker's sockets): {out_gb:,.0f} GB to the internet (an account's first"
            f" {p.DATA_TRANSFER_OUT_FREE_GB:g} GB a month free; to a feed in the region far less)",
        ),
        Line(
            "Lambda (scheduled auditor)",
            invocations * p.LAMBDA_REQUESTS_MILLION / 1e6 + gb_seconds * p.LAMBDA_ARM_GB_SECOND,
            f"{invocations:,.0f} runs × {AUDIT_SECONDS:g} s (assumed) × {AUDITOR_MEMORY_GB:g} GB",
        ),
        Line(
            "X-Ray",
            invocations * p.XRAY_TRACES_MILLION / 1e6,
            f"{invocations:,.0f} traces of {deployed.traced_functions} traced functions at rest"
            " (an account's first 100,000 a month free)",
        ),
        Line(
            "SQS",
            polls * p.SQS_REQUESTS_MILLION / 1e6,
            f"{polls:,.0f} long polls ({tasks} tasks × one per {POLL_SECONDS} s)",
        ),
        Line(
            "VPC flow logs",
            flow_gb * (p.VENDED_LOGS_INGEST_GB + p.LOGS_STORAGE_GB_MONTH),
            f"{flows:,} flows × 2 directions × a record per {FLOW_AGGREGATION_SECONDS} s of"
            f" ~{FLOW_RECORD_BYTES} B: {flow_gb:,.2f} GB",
        ),
        Line(
            "KMS (sink encryption)",
            kms / 1e4 * p.KMS_REQUESTS_10K,
            f"{kms:,.0f} requests: a data key per shard ({shards}) and principal ({tasks + 1})"
            f" every {KMS_KEY_REUSE_SECONDS} s",
        ),
        Line(
            "API method metrics",
            0.0,
            f"{deployed.api_method_metrics} detailed metrics, billed only in hours the API is"
            f" called: $0 at rest, ${api_ceiling:,.2f} if every method is called every hour",
        ),
    ]
