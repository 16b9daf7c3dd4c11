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
from typing import Any, Final, TextIO

from botocore.exceptions import BotoCoreError, ClientError

from streamlease.cli.client import ApiClient
from streamlease.cli.target import AwsTarget, TargetError, target_for
from streamlease.errors import StreamleaseError
from streamlease.templates import SecretRef

MAX_SECRET_NAME_CHARS: Final = 512
"""Secrets Manager's longest secret name."""


class SecretError(StreamleaseError):
    """The secret could not be stored; the message says why (never the value)."""


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


def check_secret_name(name: str) -> str:
    """``name`` if a profile can refer to it as written (``{secret:NAME}``): a secret name, not
    an ARN or a ``NAME#KEY`` reference. Raises ``ValueError`` saying the rule otherwise."""
    try:
        ref = SecretRef.parse(name)
    except ValueError:
        ref = None
    if ref is None or ref.key is not None or ":" in name or len(name) > MAX_SECRET_NAME_CHARS:
        raise ValueError(
            f"{name!r} is not a secret name: 1 to {MAX_SECRET_NAME_CHARS} ASCII letters, "
            "digits and / _ + = . @ - "
            "(e.g. streamlease/feed; a key of a JSON secret is named where it is used, NAME#KEY)"
        )
    return name


def store_for(client: ApiClient) -> AwsTarget:
    """Where the API at ``client.base_url`` reads secrets from. Raises :class:`SecretError`
    when it is neither a local stack nor an ``execute-api`` URL."""
    try:
        return target_for(client)
    except TargetError as exc:
        raise SecretError(
            f"{exc}: store the secret with the AWS tools of the account the stack runs in"
        ) from None


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


def put_secret(store: AwsTarget, name: str, value: str) -> dict[str, str]:
    """Create ``name`` with ``value``, or give it a new version if it exists. Returns
    ``{"name", "result": "created" | "updated", "arn"}``. Raises :class:`SecretError`."""
    client = store.client("secretsmanager")
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
        raise SecretError(
            f"cannot store secret {name} in {store.describe('Secrets Manager')}: {exc}"
        ) from None
