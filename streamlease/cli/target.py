"""Where the AWS resources of the deployment behind an API are, for commands that go to AWS
directly (``secret put``, ``consume``) rather than through the API.

One lookup, from the API URL the CLI talks to:

- an ``execute-api`` URL: AWS in that URL's region, with your AWS credentials (the default
  chain: environment, profile, SSO, role);
- a local stack (its API serves ``/local/stack``): the stack's moto server, with the dummy
  credentials the stack itself uses, never through a proxy; the stack's description names its
  resources too (``kinesis_stream_name``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import boto3
from botocore.config import Config

from streamlease.aws import LOCAL_CREDENTIAL
from streamlease.cli.client import LOCAL_STACK_PATH, ApiClient, ApiError
from streamlease.cli.signing import execute_api_region
from streamlease.cli.transport import TransportError
from streamlease.errors import StreamleaseError

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from types_boto3_kinesis import KinesisClient
    from types_boto3_secretsmanager import SecretsManagerClient


class TargetError(StreamleaseError):
    """The API's deployment cannot be found: neither a local stack nor an execute-api URL."""


@dataclass(frozen=True)
class AwsTarget:
    """An AWS endpoint (None: AWS's own), a region, and whose credentials."""

    region: str
    endpoint_url: str | None
    local: bool
    """Dummy credentials (the local stack); else the default AWS credential chain."""
    stack: Mapping[str, Any] = field(default_factory=dict)
    """The local stack's description (``GET /local/stack``); empty for AWS."""

    def describe(self, service: str) -> str:
        """``the local stack's Kinesis (moto at http://…)`` / ``Kinesis in eu-west-1``."""
        if self.local:
            return f"the local stack's {service} (moto at {self.endpoint_url})"
        return f"{service} in {self.region}"

    @overload
    def client(self, service: Literal["secretsmanager"]) -> SecretsManagerClient: ...
    @overload
    def client(self, service: Literal["kinesis"]) -> KinesisClient: ...
    def client(self, service: str) -> BaseClient:
        """A boto3 client of ``service`` for this target."""
        key = LOCAL_CREDENTIAL if self.local else None
        session = boto3.session.Session(
            aws_access_key_id=key, aws_secret_access_key=key, aws_session_token=key
        )
        made: BaseClient = session.client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint_url,
            config=Config(
                connect_timeout=5,
                read_timeout=10,
                retries={"mode": "standard"},
                proxies={} if self.local else None,  # loopback never goes through a proxy
            ),
        )
        return made


def target_for(client: ApiClient) -> AwsTarget:
    """Where the deployment behind ``client.base_url`` keeps its AWS resources. Raises
    :class:`TargetError` when it is neither a local stack nor an ``execute-api`` URL."""
    region = execute_api_region(client.base_url)
    if region:
        return AwsTarget(region, None, local=False)
    try:
        _, stack = client.request("GET", LOCAL_STACK_PATH)
    except (ApiError, TransportError) as exc:
        raise TargetError(
            f"{client.base_url} is neither a local stack nor an execute-api URL ({exc})"
        ) from None
    region = str(stack.get("aws_region") or "us-east-1")
    return AwsTarget(region, str(stack["moto_url"]), local=True, stack=stack)
