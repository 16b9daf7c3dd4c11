"""The control-plane REST API: IAM-signed calls proxied to the API Lambda."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Fn, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from cdk.components.log_retention import retain_service_log_group

STAGE_NAME = "v1"

# (method, path) of every route; each one is proxied to the API function, which does the real
# validation and answers with a JSON error naming the field at fault.
ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/streams"),
    ("GET", "/streams"),
    ("GET", "/streams/{id}"),
    ("PATCH", "/streams/{id}"),
    ("DELETE", "/streams/{id}"),
    ("POST", "/streams/{id}/stop"),
    ("POST", "/streams/{id}/start"),
    ("GET", "/workers"),
)
_LIST_QUERY_PARAMETERS = ("state", "limit", "next_token")


class ControlApi(Construct):
    """A regional REST API in front of ``handler``.

    Every method requires IAM (SigV4) authorization and goes through a request validator;
    ``POST /streams`` bodies must match a small schema before they reach the function. Access logs
    go to their own log group (never request bodies or query strings), execution errors to
    CloudWatch, and the stage is throttled to ``rate_limit_per_second`` / ``burst_limit``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        rate_limit_per_second: float,
        burst_limit: int,
        max_url_length: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.api = apigw.RestApi(
            self,
            "Api",
            description="streamlease control plane: start, stop and inspect streams",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=True,
            default_method_options=apigw.MethodOptions(
                authorization_type=apigw.AuthorizationType.IAM
            ),
            deploy_options=apigw.StageOptions(
                stage_name=STAGE_NAME,
                throttling_rate_limit=rate_limit_per_second,
                throttling_burst_limit=burst_limit,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                # Data traces would log request bodies, which carry upstream URLs.
                data_trace_enabled=False,
                metrics_enabled=True,
                tracing_enabled=True,
            ),
        )
        # API Gateway writes its execution logs (ERROR level) to a group it names and creates
        # itself, without retention and outliving a destroy.
        execution_logs = retain_service_log_group(
            self,
            "ExecutionLogs",
            log_group_name=Fn.join(
                "", ["API-Gateway-Execution-Logs_", self.api.rest_api_id, "/", STAGE_NAME]
            ),
            retention=log_retention,
        )
        self.api.deployment_stage.node.add_dependency(execution_logs)
        validator = self.api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        start_model = self.api.add_model(
            "StartStream",
            content_type="application/json",
            schema=apigw.JsonSchema(
                schema=apigw.JsonSchemaVersion.DRAFT4,
                type=apigw.JsonSchemaType.OBJECT,
                required=["id", "ws_url"],
                properties={
                    "id": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING, min_length=1),
                    "ws_url": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING, min_length=1, max_length=max_url_length
                    ),
                },
            ),
        )
        self.api.add_gateway_response(
            "InvalidBody",
            type=apigw.ResponseType.BAD_REQUEST_BODY,
            templates={
                "application/json": (
                    '{"message": "the body must be a JSON object with the strings id and ws_url"}'
                )
            },
        )
        integration = apigw.LambdaIntegration(handler, proxy=True, allow_test_invoke=False)
        for method, path in ROUTES:
            resource = self.api.root.resource_for_path(path)
            parameters: dict[str, bool] = {}
            if "{id}" in path:
                parameters["method.request.path.id"] = True
            if (method, path) == ("GET", "/streams"):
                parameters.update(
                    {f"method.request.querystring.{name}": False for name in _LIST_QUERY_PARAMETERS}
                )
            resource.add_method(
                method,
                integration,
                request_validator=validator,
                request_parameters=parameters or None,
                request_models=(
                    {"application/json": start_model}
                    if (method, path) == ("POST", "/streams")
                    else None
                ),
            )

        Validations.of(self.api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-APIG3",
                reason="Every method requires SigV4 (IAM) authorization, so API Gateway rejects "
                "unauthenticated requests before they reach the function, and the stage is "
                "throttled; for a control plane used by a few operators and their automation a "
                "WAF web ACL would mostly add cost.",
            ),
            Acknowledgment(
                id="AwsSolutions-COG4",
                reason="Callers are IAM principals (operators and automation signing with SigV4), "
                "not end users; there is no Cognito user pool to authorize against.",
            ),
            Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonAPIGatewayPushToCloudWatchLogs]",
                reason="Execution logging needs API Gateway's account-level CloudWatch role; "
                "AWS documents this managed policy for it, and only apigateway.amazonaws.com "
                "can assume the role.",
            ),
        )
