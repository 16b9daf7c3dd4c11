"""The stateless stack: control plane, worker fleet, scaling and monitoring.

Everything here can be destroyed and recreated without losing data; the state it works on is
passed in from the stateful stack.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.control_api import ControlApi
from cdk.components.fleet_alarms import FleetAlarms
from cdk.components.fleet_dashboard import FleetDashboard
from cdk.components.fleet_events import FleetEvents
from cdk.components.fleet_metrics import FleetMetrics
from cdk.components.fleet_scaling import FleetScaling
from cdk.components.network import Network
from cdk.components.secret_grants import grant_stream_secrets
from cdk.components.service_function import ServiceFunction
from cdk.components.stream_consumer import StreamConsumer
from cdk.components.table_grants import (
    API_TABLE,
    AUDITOR_TABLE,
    PREVIOUS_WORKERS,
    REAPER_TABLE,
    SEND_COMMANDS,
    WORKER_TABLE,
    grant_table,
    with_access,
)
from cdk.components.worker_fleet import WorkerFleet
from cdk.config import DeploymentConfig, TableIndexes
from streamlease import telemetry
from streamlease.settings import Settings, SettingValue, settings_environment
from streamlease.telemetry import AuditorMetric


class StatelessStack(Stack):
    """Lambdas (API, reaper, auditor), the REST API, the VPC, the Fargate worker service, its
    scaling, the EventBridge rules, the dashboard and the alarms."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        table: dynamodb.ITableV2,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        sink_stream: kinesis.IStream,
        watermarks: dynamodb.ITableV2 | None = None,
        lambda_asset: str,
        image_directory: str,
        dockerfile: str,
        log_retention: logs.RetentionDays,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        shared_settings: dict[str, SettingValue] = {
            "liveness": config.liveness.value,
            "lease_seconds": config.lease_seconds,
            "heartbeat_seconds": config.heartbeat_seconds,
            "reconcile_seconds": config.reconcile_seconds,
            "capacity": config.capacity_per_worker,
            "allowed_hosts": config.allowed_upstream_hosts,
            "secrets_prefix": config.secrets_prefix,
        }

        # --- control plane -------------------------------------------------------------------
        code = lambda_.Code.from_asset(lambda_asset)
        function_env = settings_environment(
            {
                "table_name": table.table_name,
                "queue_url": queue.queue_url,
                "aws_region": Aws.REGION,
                "metrics_namespace": config.metrics_namespace,
                **shared_settings,
            }
        )

        def function(
            construct_id: str, handler: str, service: str, description: str, **kw: Any
        ) -> ServiceFunction:
            return ServiceFunction(
                self,
                construct_id,
                code=code,
                handler=handler,
                service_name=service,
                metrics_namespace=config.metrics_namespace,
                environment=function_env,
                description=description,
                log_retention=log_retention,
                **kw,
            )

        api = function(
            "ApiFunction",
            "lambdas.api.handler",
            telemetry.API_SERVICE,
            "streamlease API: start, stop, get and list streams; list workers",
            timeout=Duration.seconds(10),
            memory_size_mib=512,
        )
        reaper = function(
            "ReaperFunction",
            "lambdas.reaper.handler",
            telemetry.REAPER_SERVICE,
            "streamlease reaper: releases the leases of a stopped worker task",
            timeout=Duration.seconds(60),
        )
        auditor = function(
            "AuditorFunction",
            "lambdas.auditor.handler",
            telemetry.AUDITOR_SERVICE,
            "streamlease auditor: publishes wanted, owned and orphaned stream counts",
            timeout=Duration.seconds(50),
        )
        grant_table(table, api.role, API_TABLE)
        if config.secrets_prefix:  # the API says when a stream names a secret that is missing
            grant_stream_secrets(
                self,
                "ApiSecretLookup",
                api.role,
                config.secrets_prefix,
                ["secretsmanager:DescribeSecret"],
            )
        queue.grant(api.role, *SEND_COMMANDS)
        grant_table(table, reaper.role, REAPER_TABLE)
        queue.grant(reaper.role, *SEND_COMMANDS)
        grant_table(table, auditor.role, AUDITOR_TABLE)
        api_fn, reaper_fn, auditor_fn = api.function, reaper.function, auditor.function

        control_api = ControlApi(
            self,
            "ControlApi",
            handler=api_fn,
            rate_limit_per_second=config.api_rate_limit_per_second,
            burst_limit=config.api_burst_limit,
            max_url_length=Settings.max_url_length,
            log_retention=log_retention,
        )

        # --- data plane ----------------------------------------------------------------------
        network = Network(
            self,
            "Network",
            mode=config.networking,
            log_retention=log_retention,
            nat_gateways=config.nat_gateways,
        )
        fleet = WorkerFleet(
            self,
            "Workers",
            vpc=network.vpc,
            subnets=network.worker_subnets,
            assign_public_ip=network.assign_public_ip,
            image_directory=image_directory,
            dockerfile=dockerfile,
            architecture=config.worker_architecture,
            cpu=config.worker_cpu,
            memory_mib=config.worker_memory_mib,
            table=table,
            queue=queue,
            sink_stream=sink_stream,
            metrics_namespace=config.metrics_namespace,
            settings={
                **shared_settings,
                "visibility_timeout_seconds": config.command_visibility_timeout_seconds,
            },
            log_retention=log_retention,
            secrets_prefix=config.secrets_prefix,
            spot_beyond_tasks=config.min_tasks if config.fargate_spot else None,
            table_access=(
                with_access(WORKER_TABLE, PREVIOUS_WORKERS)
                if config.table_indexes is TableIndexes.HOLDER_ADDED
                else WORKER_TABLE
            ),
            container_insights=config.container_insights,
        )
        network.allow_clients(fleet.security_group)
        metrics = FleetMetrics(
            namespace=config.metrics_namespace,
            cluster=fleet.cluster,
            service=fleet.service,
            container_insights=config.container_insights,
        )
        FleetScaling(
            self,
            "Scaling",
            service=fleet.service,
            min_tasks=config.min_tasks,
            max_tasks=config.max_tasks,
            wanted_streams=metrics.auditor(AuditorMetric.STARTED_STREAMS, statistic="Average"),
            running_tasks=metrics.running_tasks(),
            target_streams_per_task=config.target_streams_per_task,
            target_cpu_percent=config.target_cpu_percent,
        )
        fleet_events = FleetEvents(
            self, "Events", cluster=fleet.cluster, reaper=reaper_fn, auditor=auditor_fn
        )

        # --- the optional consumer of the sink (streamlease:consumer) ---------------------------
        consumer = None
        if config.consumer:
            if watermarks is None:
                raise ValueError("the consumer needs the stateful stack's watermark table")
            consumer = StreamConsumer(
                self,
                "Consumer",
                code=code,
                sink_stream=sink_stream,
                watermarks=watermarks,
                environment=settings_environment(
                    {
                        "watermark_table_name": watermarks.table_name,
                        "kinesis_stream_name": sink_stream.stream_name,
                        "aws_region": Aws.REGION,
                    }
                ),
                metrics_namespace=config.metrics_namespace,
                log_retention=log_retention,
                batching_window_seconds=config.consumer_batching_window_seconds,
            )

        # --- operations ----------------------------------------------------------------------
        functions = {"api": api_fn, "reaper": reaper_fn, "auditor": auditor_fn}
        alarms = FleetAlarms(
            self,
            "Alarms",
            metrics=metrics,
            api=control_api.api,
            table=table,
            dead_letter_queue=dead_letter_queue,
            sink_stream=sink_stream,
            reaper_dead_letter_queue=fleet_events.reaper_dead_letters,
            functions=functions,
            min_live_workers=config.min_tasks,
            max_tasks=config.max_tasks,
            capacity_per_task=config.capacity_per_worker,
            renewal_lag_limit_ms=config.renewal_lag_alarm_ms,
            renewal_answer_age_limit_ms=config.renewal_answer_age_alarm_ms,
            email=config.alarm_email,
            consumer=(consumer.function, consumer.failures) if consumer else None,
        )
        dashboard = FleetDashboard(
            self,
            "Dashboard",
            metrics=metrics,
            api=control_api.api,
            functions=functions,
            queue=queue,
            dead_letter_queue=dead_letter_queue,
            table=table,
            sink_stream=sink_stream,
            alarms=alarms.by_name,
        )

        CfnOutput(self, "ApiUrl", value=control_api.api.url, description="streamlease --api URL")
        CfnOutput(self, "DashboardUrl", value=dashboard.url)
        CfnOutput(self, "AlarmTopicArn", value=alarms.topic.topic_arn)
        CfnOutput(self, "ClusterName", value=fleet.cluster.cluster_name)
