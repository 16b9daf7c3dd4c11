"""The worker fleet: an ECS cluster and the Fargate service running ``python -m worker``."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import (
    Acknowledgment,
    Aws,
    Duration,
    RemovalPolicy,
    Size,
    Validations,
)
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.secret_grants import grant_stream_secrets
from cdk.components.table_grants import (
    WORKER_COMMANDS,
    WORKER_SINK,
    WORKER_TABLE,
    TableAccess,
    grant_table,
)
from cdk.components.trace_collector import add_trace_collector
from cdk.config import CpuArchitecture
from streamlease import telemetry
from streamlease.settings import SettingValue, settings_environment
from streamlease.telemetry import TraceExport

STOP_TIMEOUT_SECONDS = 120
"""What ECS waits between SIGTERM and SIGKILL (the Fargate maximum)."""
SHUTDOWN_MARGIN_SECONDS = 20
"""Part of the stop timeout the worker leaves unused, so its last logs and metrics get out."""

_PLATFORMS = {
    CpuArchitecture.X86_64: (ecr_assets.Platform.LINUX_AMD64, ecs.CpuArchitecture.X86_64),
    CpuArchitecture.ARM64: (ecr_assets.Platform.LINUX_ARM64, ecs.CpuArchitecture.ARM64),
}


def _spot_strategy(
    on_demand_base: int | None,
) -> list[ecs.CapacityProviderStrategy] | None:
    """Fargate for the first ``on_demand_base`` tasks, then one Fargate Spot task for each
    Fargate one (None: Fargate only, the service's launch type)."""
    if on_demand_base is None:
        return None
    return [
        ecs.CapacityProviderStrategy(capacity_provider="FARGATE", base=on_demand_base, weight=1),
        ecs.CapacityProviderStrategy(capacity_provider="FARGATE_SPOT", weight=1),
    ]


class WorkerFleet(Construct):
    """The cluster (Container Insights on unless ``container_insights`` is false) and a Fargate
    service of worker tasks.

    Deployments never drop below the running count (min healthy 100 %, max 200 %) and roll back
    on the circuit breaker; a stopped task gets ``STOP_TIMEOUT_SECONDS`` to release its leases.
    The task role may call exactly the actions the worker uses on the lease table and its
    indexes, the command queue and the sink stream (:mod:`cdk.components.table_grants`), and
    (when ``secrets_prefix`` is set) read the Secrets Manager secrets whose names start with it
    — what streams' handshake headers may refer to. The desired count is left to the scaling
    policy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        assign_public_ip: bool,
        image_directory: str,
        dockerfile: str,
        architecture: CpuArchitecture,
        cpu: int,
        memory_mib: int,
        table: dynamodb.ITableV2,
        queue: sqs.IQueue,
        sink_stream: kinesis.IStream,
        metrics_namespace: str,
        settings: Mapping[str, SettingValue],
        log_retention: logs.RetentionDays,
        secrets_prefix: str = "",
        spot_beyond_tasks: int | None = None,
        table_access: TableAccess = WORKER_TABLE,
        container_insights: bool = True,
    ) -> None:
        """``spot_beyond_tasks``: None runs every task on Fargate; N runs the first N on Fargate
        and the rest on Fargate Spot and Fargate alike. ``table_access``: the worker role's
        DynamoDB grants (more while a table migrates)."""
        super().__init__(scope, construct_id)
        asset_platform, cpu_architecture = _PLATFORMS[architecture]
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=vpc,
            container_insights_v2=(
                ecs.ContainerInsights.ENABLED
                if container_insights
                else ecs.ContainerInsights.DISABLED
            ),
            enable_fargate_capacity_providers=spot_beyond_tasks is not None,
        )
        if not container_insights:
            Validations.of(self.cluster).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-ECS4",
                    reason="Container Insights is off (every preset leaves it off, "
                    "~30 custom metrics a month less; streamlease:containerInsights=true): the "
                    "service's CPU and memory utilization (AWS/ECS) and the workers' own metrics "
                    "remain, and scaling counts the auditor's live workers instead of tasks.",
                )
            )
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            cpu=cpu,
            memory_limit_mib=memory_mib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=cpu_architecture,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        environment = settings_environment(
            {
                "table_name": table.table_name,
                "queue_url": queue.queue_url,
                "kinesis_stream_name": sink_stream.stream_name,
                "sink": "kinesis",
                "aws_region": Aws.REGION,
                "metrics_namespace": metrics_namespace,
                "shutdown_budget_seconds": STOP_TIMEOUT_SECONDS - SHUTDOWN_MARGIN_SECONDS,
                "trace_export": TraceExport.OTLP.value,
                **settings,
            }
        )
        self.container = self.task_definition.add_container(
            "worker",
            image=ecs.ContainerImage.from_asset(
                image_directory, file=dockerfile, platform=asset_platform
            ),
            environment={
                "POWERTOOLS_SERVICE_NAME": telemetry.WORKER_SERVICE,
                "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace,
                **environment,
            },
            essential=True,
            stop_timeout=Duration.seconds(STOP_TIMEOUT_SECONDS),
            health_check=ecs.HealthCheck(
                command=["CMD", "python", "-m", "worker.health"],
                interval=Duration.seconds(30),
                timeout=Duration.seconds(5),
                retries=3,
                start_period=Duration.seconds(60),
            ),
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix="worker",
                log_group=self.log_group,
                # A slow log pipe must never stall the event loop that renews leases.
                mode=ecs.AwsLogDriverMode.NON_BLOCKING,
                max_buffer_size=Size.mebibytes(25),
            ),
        )
        self.trace_collector = add_trace_collector(self, self.task_definition, self.log_group)
        task_role = self.task_definition.task_role
        grant_table(table, task_role, table_access)
        queue.grant(task_role, *WORKER_COMMANDS)
        sink_stream.grant(task_role, *WORKER_SINK)
        if secrets_prefix:
            self._grant_secrets(task_role, secrets_prefix)

        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="streamlease workers: outbound only (upstreams and AWS APIs)",
            allow_all_outbound=True,
        )
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=self.cluster,
            task_definition=self.task_definition,
            vpc_subnets=subnets,
            assign_public_ip=assign_public_ip,
            security_groups=[self.security_group],
            min_healthy_percent=100,
            max_healthy_percent=200,
            circuit_breaker=ecs.DeploymentCircuitBreaker(enable=True, rollback=True),
            platform_version=ecs.FargatePlatformVersion.LATEST,
            propagate_tags=ecs.PropagatedTagSource.SERVICE,
            enable_ecs_managed_tags=True,
            capacity_provider_strategies=_spot_strategy(spot_beyond_tasks),
        )

        Validations.of(self.task_definition).acknowledge(
            Acknowledgment(
                id="AwsSolutions-ECS2",
                reason="The environment holds resource names and tuning values only (table, "
                "queue, stream, lease timings); the worker has no secrets, its AWS access comes "
                "from the task role.",
            ),
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="The execution role's only wildcard is ecr:GetAuthorizationToken, which "
                "has no resource-level permissions; image pulls are scoped to the asset "
                "repository.",
            ),
        )

    def _grant_secrets(self, role: iam.IRole, prefix: str) -> None:
        """Read access to the secrets under ``prefix`` (names and their random suffixes)."""
        grant_stream_secrets(self, "StreamSecrets", role, prefix, ["secretsmanager:GetSecretValue"])
