"""boto3 clients built from :class:`Settings`: one place for endpoints, region and timeouts.

Low-level clients are thread-safe, so one client per process is shared by every thread. boto3
is imported when the first client is made, not with this module: a Lambda handler that imports
it pays for the SDK (about 0.1 s at a cold start) only when it makes a client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, overload

from streamlease.settings import Settings

LOCAL_CREDENTIAL: Final = "testing"
"""Access key id, secret key and session token of every process that talks to the local
stack's moto server: moto takes any, and a developer's own keys never go there."""

# Client types come from stubs in the dev extras (types-boto3-lite); the worker image and the
# Lambda asset do not have them, so they are imported for type checking only.
if TYPE_CHECKING:
    from botocore.client import BaseClient
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_kinesis import KinesisClient
    from types_boto3_secretsmanager import SecretsManagerClient
    from types_boto3_sqs import SQSClient


@overload
def client(
    service: Literal["dynamodb"],
    settings: Settings,
    *,
    read_timeout_seconds: float | None = None,
    connect_timeout_seconds: float | None = None,
    max_attempts: int = 3,
) -> DynamoDBClient: ...
@overload
def client(
    service: Literal["sqs"],
    settings: Settings,
    *,
    read_timeout_seconds: float | None = None,
    connect_timeout_seconds: float | None = None,
    max_attempts: int = 3,
) -> SQSClient: ...
@overload
def client(
    service: Literal["kinesis"],
    settings: Settings,
    *,
    read_timeout_seconds: float | None = None,
    connect_timeout_seconds: float | None = None,
    max_attempts: int = 3,
) -> KinesisClient: ...
@overload
def client(
    service: Literal["secretsmanager"],
    settings: Settings,
    *,
    read_timeout_seconds: float | None = None,
    connect_timeout_seconds: float | None = None,
    max_attempts: int = 3,
) -> SecretsManagerClient: ...
def client(
    service: str,
    settings: Settings,
    *,
    read_timeout_seconds: float | None = None,
    connect_timeout_seconds: float | None = None,
    max_attempts: int = 3,
) -> BaseClient:
    """A boto3 client for ``service``: ``dynamodb``, ``sqs``, ``kinesis`` or ``secretsmanager``,
    typed for mypy as that service's client (the overloads above), so every call's arguments are
    checked against the service's API.

    ``read_timeout_seconds`` and ``connect_timeout_seconds`` default to
    ``settings.dynamodb_timeout_seconds``; an SQS long poll needs a longer read, the Kinesis sink
    its own timeout (``settings.sink_call_timeout_seconds``). Retries use botocore's
    ``standard`` mode, ``max_attempts`` attempts in all, the first included (1: no retry behind
    the caller's back, for callers that must not send after a deadline). botocore's own
    ``max_attempts`` key counts *retries*; this sets ``total_max_attempts``, which counts
    attempts.
    """
    import boto3
    from botocore.config import Config

    timeout = (
        settings.dynamodb_timeout_seconds if read_timeout_seconds is None else read_timeout_seconds
    )
    connect = (
        settings.dynamodb_timeout_seconds
        if connect_timeout_seconds is None
        else connect_timeout_seconds
    )
    config = Config(
        connect_timeout=connect,
        read_timeout=timeout,
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        max_pool_connections=64,
    )
    made: BaseClient = boto3.session.Session().client(
        service,
        region_name=settings.aws_region,
        endpoint_url=settings.aws_endpoint_url or None,
        config=config,
    )
    return made
