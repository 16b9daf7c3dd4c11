"""The ADOT collector beside each worker: OTLP spans in on localhost, X-Ray segments out.

The worker exports its spans (:mod:`worker.tracing`) as OTLP over HTTP to 127.0.0.1:4318, which
in a Fargate task (``awsvpc``) is the collector container; the collector batches them and sends
them to X-Ray as segments of the same traces the API and the reaper started. Its configuration is
ours, given in an environment variable, so it opens nothing but that one port and exports traces
only.

The collector's version is pinned here, in :data:`COLLECTOR_IMAGE`. To move it: pick a release of
``aws-observability/aws-otel-collector`` (its GitHub releases list the image tags), change the
tag, ``make test``, deploy.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from streamlease.settings import Settings

COLLECTOR_IMAGE: Final = "public.ecr.aws/aws-observability/aws-otel-collector:v0.49.0"
CONFIG_VARIABLE: Final = "COLLECTOR_CONFIG"
OTLP_HTTP_ENDPOINT: Final = urlsplit(Settings.trace_otlp_endpoint).netloc
"""Where the collector listens: where the worker's ``trace_otlp_endpoint`` points by default."""
COLLECTOR_CONFIG: Final = f"""\
receivers:
  otlp:
    protocols:
      http:
        endpoint: {OTLP_HTTP_ENDPOINT}
processors:
  batch: {{}}
exporters:
  awsxray: {{}}
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [awsxray]
"""
XRAY_ACTIONS: Final = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")
COLLECTOR_MEMORY_RESERVATION_MIB: Final = 64


def add_trace_collector(
    scope: Construct, task_definition: ecs.TaskDefinition, log_group: logs.ILogGroup
) -> ecs.ContainerDefinition:
    """Add the collector container to ``task_definition`` (not essential: the worker runs on if
    it stops, only traces are lost) and let the task role send segments to X-Ray."""
    container = task_definition.add_container(
        "trace-collector",
        image=ecs.ContainerImage.from_registry(COLLECTOR_IMAGE),
        command=[f"--config=env:{CONFIG_VARIABLE}"],
        environment={CONFIG_VARIABLE: COLLECTOR_CONFIG},
        essential=False,
        memory_reservation_mib=COLLECTOR_MEMORY_RESERVATION_MIB,
        logging=ecs.LogDrivers.aws_logs(
            stream_prefix="collector",
            log_group=log_group,
            mode=ecs.AwsLogDriverMode.NON_BLOCKING,
        ),
    )
    policy = iam.Policy(
        scope,
        "TraceSegments",
        statements=[iam.PolicyStatement(actions=list(XRAY_ACTIONS), resources=["*"])],
    )
    policy.attach_to_role(task_definition.task_role)
    Validations.of(policy).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason="X-Ray PutTraceSegments and PutTelemetryRecords support no resource-level "
            "permissions; the collector beside the worker sends its trace segments with them.",
        )
    )
    return container
