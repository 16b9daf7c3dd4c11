"""A control-plane Lambda function with its own role, log group and Powertools settings."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct


class ServiceFunction(Construct):
    """One Lambda function running ``handler`` from the shared code asset.

    Python 3.12 on arm64 (the asset's wheels are built for it), X-Ray tracing on, logs in an
    explicit log group with ``log_retention``. The role starts with nothing but writing to that
    log group and sending traces; callers grant the rest with the resources' ``grant_*`` methods.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        handler: str,
        service_name: str,
        metrics_namespace: str,
        environment: Mapping[str, str],
        description: str,
        log_retention: logs.RetentionDays,
        timeout: Duration,
        memory_size_mib: int = 256,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=log_retention,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # An own role instead of the default one: the default attaches the AWS managed
        # AWSLambdaBasicExecutionRole policy, which may write to every log group in the account.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{service_name}: writes its own logs; data access granted per resource",
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            code=code,
            handler=handler,
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            memory_size=memory_size_mib,
            timeout=timeout,
            role=self.role,
            log_group=self.log_group,
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                "POWERTOOLS_SERVICE_NAME": service_name,
                "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace,
                **environment,
            },
        )
        Validations.of(self.function).acknowledge(
            Acknowledgment(
                id="AwsSolutions-L1",
                reason="Python 3.12 is the runtime the code asset's wheels are built and tested "
                "for; moving to a newer runtime is a deliberate change of the build target.",
            )
        )
        Validations.of(self.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="X-Ray PutTraceSegments/PutTelemetryRecords support no resource-level "
                "permissions; this is the statement Lambda active tracing adds.",
            )
        )
