"""Whether the secrets a new or changed profile refers to exist: named in the answer as a
warning, never a refusal.

Not a 400, because a secret may rightly come after the stream: a deployment that creates the
stream before the secret, ``streamlease secret put`` run after ``start``, a rotation that deletes
and creates it again. Until it exists the worker rejects the stream (``REJECTED``, the cause
in ``last_error``) and picks it up by itself once it does. A check that cannot be made (no
permission, Secrets Manager not answering) says nothing: the answer never waits on it to fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from aws_lambda_powertools import Logger

from streamlease.telemetry import API_SERVICE
from streamlease.templates import SecretRef

if TYPE_CHECKING:
    from types_boto3_secretsmanager import SecretsManagerClient

logger = Logger(service=API_SERVICE, child=True)

MAX_CHECKED: Final = 10
"""Secrets looked up per request at most (a profile rarely names more than two)."""
NOT_FOUND: Final = "ResourceNotFoundException"


def missing_secret_warnings(client: SecretsManagerClient, refs: Iterable[SecretRef]) -> list[str]:
    """One warning per referred secret that does not exist or is scheduled for deletion, in
    reference order; empty when every one exists or none could be checked. One
    ``DescribeSecret`` per distinct secret (its value is never read)."""
    from botocore.exceptions import BotoCoreError, ClientError  # loaded with the client

    names = list(dict.fromkeys(ref.name for ref in refs))[:MAX_CHECKED]
    warnings = []
    for name in names:
        try:
            found = client.describe_secret(SecretId=name)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == NOT_FOUND:
                warnings.append(missing_warning(name, "does not exist (yet)"))
                continue
            logger.warning("secret check failed", error_code=code)
            break
        except BotoCoreError as exc:
            logger.warning("secret check failed", error_type=type(exc).__name__)
            break
        if found.get("DeletedDate"):
            warnings.append(missing_warning(name, "is scheduled for deletion"))
    return warnings


def missing_warning(name: str, state: str) -> str:
    """What the answer says of secret ``name`` in ``state``."""
    return (
        f"secret {name} {state}: the stream is rejected until it exists "
        f"(streamlease secret put {name})"
    )
