"""``streamlease secret put NAME``: store a secret where the stack's workers read it.

A stream's profile refers to secrets by name (``Authorization=Bearer {secret:NAME}``); the
worker reads them from AWS Secrets Manager when it connects. This command writes one, for the
API the CLI talks to:

- a local stack (its API serves ``/local/stack``): the stack's moto server, with the dummy
  credentials the stack itself uses — nothing to install or configure;
- an ``execute-api`` URL: Secrets Manager in that URL's region, with your AWS credentials.

The value is read from stdin (a prompt without echo on a terminal), never from the command
line, where it would stay in the shell's history and in the process list; one trailing newline
is dropped. It is never printed.
"""

from __future__ import annotations

import argparse
import getpass
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from streamlease.aws import LOCAL_CREDENTIAL
from streamlease.cli.client import LOCAL_STACK_PATH, ApiClient, ApiError
from streamlease.cli.signing import execute_api_region
from streamlease.cli.transport import TransportError
from streamlease.errors import StreamleaseError

if TYPE_CHECKING:
    from types_boto3_secretsmanager import SecretsManagerClient


class SecretError(StreamleaseError):
    """The secret could not be stored; the message says why (never the value)."""


@dataclass(frozen=True)
class SecretStore:
    """Where secrets go: a Secrets Manager endpoint (None: AWS's own), a region, credentials."""

    region: str
    endpoint_url: str | None
    local: bool
    """Dummy credentials (the local stack); else the default AWS credential chain (your profile
    or environment)."""

    @property
    def description(self) -> str:
        """``the local stack's moto at http://…`` / ``Secrets Manager in eu-west-1``."""
        if self.local:
            return f"the local stack's Secrets Manager (moto at {self.endpoint_url})"
        return f"Secrets Manager in {self.region}"

    def client(self) -> SecretsManagerClient:
        """A Secrets Manager client for this store."""
        key = LOCAL_CREDENTIAL if self.local else None
        session = boto3.session.Session(
            aws_access_key_id=key, aws_secret_access_key=key, aws_session_token=key
        )
        made: SecretsManagerClient = session.client(
            "secretsmanager",
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


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``secret put NAME`` to the CLI's subcommands."""
    help_text = "store a secret that streams' headers refer to (value from stdin)"
    secret = commands.add_parser("secret", parents=[common], help=help_text, description=__doc__)
    actions = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True)
    put = actions.add_parser(
        "put",
        parents=[common],
        help="create or update a secret; its value is read from stdin",
        description="Create or update secret NAME with the value read from stdin.",
    )
    put.add_argument("name", help="secret name, e.g. streamlease/meetings")


def store_for(client: ApiClient) -> SecretStore:
    """Where the API at ``client.base_url`` reads secrets from. Raises :class:`SecretError`
    when it is neither a local stack nor an ``execute-api`` URL."""
    region = execute_api_region(client.base_url)
    if region:
        return SecretStore(region, None, local=False)
    try:
        _, stack = client.request("GET", LOCAL_STACK_PATH)
    except (ApiError, TransportError) as exc:
        raise SecretError(
            f"{client.base_url} is neither a local stack nor an execute-api URL ({exc}): "
            "store the secret with the AWS tools of the account the stack runs in"
        ) from None
    region = str(stack.get("aws_region") or "us-east-1")
    return SecretStore(region, str(stack["moto_url"]), local=True)


def read_value(stdin: TextIO, name: str) -> str:
    """The secret's value: a prompt without echo on a terminal, else all of stdin less one
    trailing newline. Raises :class:`SecretError` for an empty value."""
    if stdin.isatty():
        value = getpass.getpass(f"value of {name}: ")
    else:
        value = stdin.read()
        value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise SecretError("the value is empty: give it on stdin")
    return value


def put_secret(store: SecretStore, name: str, value: str) -> dict[str, str]:
    """Create ``name`` with ``value``, or give it a new version if it exists. Returns
    ``{"name", "result": "created" | "updated", "arn"}``. Raises :class:`SecretError`."""
    client = store.client()
    try:
        try:
            made = client.create_secret(Name=name, SecretString=value)
            return {"name": name, "result": "created", "arn": made["ARN"]}
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceExistsException":
                raise
        put = client.put_secret_value(SecretId=name, SecretString=value)
        return {"name": name, "result": "updated", "arn": put["ARN"]}
    except (ClientError, BotoCoreError) as exc:
        raise SecretError(f"cannot store secret {name} in {store.description}: {exc}") from None
