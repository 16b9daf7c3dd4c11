"""The worker network: a VPC whose tasks reach upstreams and AWS APIs, with a flow log."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from cdk.config import NetworkingMode

_MAX_AZS = 2


class Network(Construct):
    """A two-AZ VPC for the worker tasks.

    ``PUBLIC``: public subnets only, tasks get a public IP, no NAT gateway (no inbound rule is ever
    opened; the security group only allows egress). ``PRIVATE``: tasks in private subnets behind a
    NAT gateway per AZ. Either way a DynamoDB gateway endpoint keeps the lease traffic (the bulk
    of AWS calls) off the internet path, and a flow log records every flow.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        mode: NetworkingMode,
        log_retention: logs.RetentionDays,
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
            nat_gateways=_MAX_AZS if mode is NetworkingMode.PRIVATE else 0,
            subnet_configuration=subnets,
        )
        self.vpc.add_gateway_endpoint(
            "DynamoDbEndpoint", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB
        )
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
