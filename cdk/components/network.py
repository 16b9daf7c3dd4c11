"""The worker network: a VPC whose tasks reach upstreams and AWS APIs, with a flow log."""

from __future__ import annotations

from typing import Final

from aws_cdk import CfnResource, Fn, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from cdk.components.log_retention import retain_service_log_group
from cdk.config import NetworkingMode

_MAX_AZS = 2
DEFAULT_SG_PROVIDER_ID: Final = "Custom::VpcRestrictDefaultSGCustomResourceProvider"
"""Construct id (in the stack) of the CDK's provider behind ``restrictDefaultSecurityGroup``."""
INTERFACE_ENDPOINTS: Final = {
    "Kinesis": ec2.InterfaceVpcEndpointAwsService.KINESIS_STREAMS,
    "Sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
}
"""What a private worker task calls besides DynamoDB and S3 (gateway endpoints): the sink, the
command queue, its logs and metrics (EMF is logs), the image pull and the streams' secrets.
Task credentials come from the ECS agent, so STS is not among them."""


class Network(Construct):
    """A two-AZ VPC for the worker tasks.

    ``PUBLIC``: public subnets only, tasks get a public IP, no NAT gateway (no inbound rule is ever
    opened; the security group only allows egress). ``PRIVATE``: tasks in private subnets; every
    AWS API they call has a VPC endpoint (:data:`INTERFACE_ENDPOINTS`, and gateway endpoints
    for DynamoDB and S3, where ECR keeps image layers), so only upstream traffic crosses the
    ``nat_gateways`` NAT gateways. Either way a DynamoDB gateway endpoint keeps the lease traffic
    off the internet path, and a flow log records every flow.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        mode: NetworkingMode,
        log_retention: logs.RetentionDays,
        nat_gateways: int = _MAX_AZS,
    ) -> None:
        super().__init__(scope, construct_id)
        subnets = [ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC)]
        if mode is NetworkingMode.PRIVATE:
            subnets.append(
                ec2.SubnetConfiguration(
                    name="workers", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS
                )
            )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=_MAX_AZS,
            nat_gateways=nat_gateways if mode is NetworkingMode.PRIVATE else 0,
            subnet_configuration=subnets,
        )
        self.vpc.add_gateway_endpoint(
            "DynamoDbEndpoint", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB
        )
        self.interface_endpoints: list[ec2.InterfaceVpcEndpoint] = []
        if mode is NetworkingMode.PRIVATE:
            self.vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)
            self.interface_endpoints = [
                self.vpc.add_interface_endpoint(
                    f"{name}Endpoint",
                    service=service,
                    subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
                    private_dns_enabled=True,
                    open=False,  # HTTPS from the workers only: allow_clients
                )
                for name, service in INTERFACE_ENDPOINTS.items()
            ]
        self._retain_default_sg_handler_logs(log_retention)
        flow_logs = logs.LogGroup(
            self, "FlowLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        self.worker_subnets = ec2.SubnetSelection(
            subnet_type=(
                ec2.SubnetType.PRIVATE_WITH_EGRESS
                if mode is NetworkingMode.PRIVATE
                else ec2.SubnetType.PUBLIC
            )
        )
        self.assign_public_ip = mode is NetworkingMode.PUBLIC

    def _retain_default_sg_handler_logs(self, log_retention: logs.RetentionDays) -> None:
        """The VPC's custom resource that empties the default security group runs a Lambda
        function of the CDK's whose log group Lambda creates on first run, without retention
        and outliving a destroy."""
        provider = Stack.of(self).node.try_find_child(DEFAULT_SG_PROVIDER_ID)
        handler = provider.node.try_find_child("Handler") if provider is not None else None
        if not isinstance(handler, CfnResource):
            return
        group = retain_service_log_group(
            self,
            "DefaultSecurityGroupHandlerLogs",
            log_group_name=Fn.join("", ["/aws/lambda/", handler.ref]),
            retention=log_retention,
        )
        for resource in self.vpc.node.find_all():
            if isinstance(resource, CfnResource) and resource.cfn_resource_type.startswith(
                "Custom::VpcRestrictDefaultSG"
            ):
                resource.node.add_dependency(group)

    def allow_clients(self, clients: ec2.IConnectable) -> None:
        """Let ``clients`` (the workers' security group) reach the interface endpoints."""
        for endpoint in self.interface_endpoints:
            endpoint.connections.allow_default_port_from(clients, "workers call AWS APIs")
