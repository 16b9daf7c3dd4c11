"""Secrets a stream's profile refers to, read from AWS Secrets Manager when connecting.

A profile's header value ``secret:<name>`` (or ``{secret:<name>}`` inside a header value or an
open message) names a secret; its value is read just before a connection attempt through
Powertools Parameters (``SecretsProvider.get`` with ``max_age``, on the worker's own boto3
client), which keeps it for :data:`CACHE_SECONDS` so a fleet of streams sharing one secret does
not read it per stream. After the upstream refused a handshake or an open message the secret is
read again at once (``force_fetch``), so a
rotated secret is picked up on the next attempt. A value is never logged, stored, put in an
error text or returned to anyone but the caller that resolves it.

Only names under ``Settings.secrets_prefix`` are read (the IAM policy allows no more; the
check here makes a stray reference an explicit refusal instead of an access error).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.exceptions import (
    GetParameterError,
    TransformParameterError,
)
from botocore.exceptions import ClientError

from streamlease import aws
from streamlease.errors import UpstreamRejected
from streamlease.profile import SecretRef
from streamlease.settings import Settings
from worker.stream.link import SecretsUnavailable

if TYPE_CHECKING:
    from types_boto3_secretsmanager import SecretsManagerClient

CACHE_SECONDS: Final = 30
"""How long a secret's value is reused before it is read again."""
_PERMANENT: Final = frozenset({"ResourceNotFoundException", "AccessDeniedException"})


class SecretUnavailable(SecretsUnavailable):
    """A secret could not be read for now (throttled, unreachable): the connection attempt is
    retried with backoff."""


class Secrets:
    """Resolves secret references, with a short cache per secret."""

    def __init__(self, settings: Settings, client: SecretsManagerClient | None = None) -> None:
        """``client``: a boto3 Secrets Manager client (default: built on first use)."""
        self._settings = settings
        self._client = client
        self._provider: SecretsProvider | None = None
        self._stale: set[str] = set()
        """References (their text) to read afresh on their next use: the upstream refused
        them."""

    async def resolve(self, refs: Iterable[SecretRef]) -> dict[str, str]:
        """Each reference's value by its text (``name`` or ``name#key``).

        Raises :class:`UpstreamRejected` for a reference that can never be read (missing,
        denied, outside the prefix, no such JSON key), :class:`SecretUnavailable` otherwise.
        """
        return {ref.text: await self._value(ref) for ref in refs}

    def forget(self, refs: Sequence[SecretRef]) -> None:
        """Read these secrets again next time (the upstream refused what they gave)."""
        self._stale.update(ref.text for ref in refs)

    async def _value(self, ref: SecretRef) -> str:
        prefix = self._settings.secrets_prefix
        if not prefix or not ref.secret_name().startswith(prefix):
            raise UpstreamRejected(f"secret {ref.name!r} is outside the allowed prefix")
        fresh = ref.text in self._stale
        self._stale.discard(ref.text)
        value = await asyncio.to_thread(self._read, ref, fresh)
        if ref.key is None:
            if not isinstance(value, str):
                raise UpstreamRejected(f"secret {ref.name!r} has no text value")
            return value
        field = value.get(ref.key) if isinstance(value, dict) else None
        if field is None:
            raise UpstreamRejected(f"secret {ref.name!r} has no JSON key {ref.key!r}")
        if not isinstance(field, str):
            raise UpstreamRejected(f"secret {ref.name!r} key {ref.key!r} is not text")
        return field

    def _read(self, ref: SecretRef, fresh: bool) -> Any:
        """The secret's text, or its JSON document when ``ref`` names a key (from the cache
        unless ``fresh`` or older than :data:`CACHE_SECONDS`)."""
        provider = self._provider
        if provider is None:
            client = self._client or aws.client("secretsmanager", self._settings)
            provider = self._provider = SecretsProvider(boto3_client=client)
        try:
            return provider.get(
                ref.name,
                max_age=CACHE_SECONDS,
                transform=None if ref.key is None else "json",
                force_fetch=fresh,
            )
        except TransformParameterError:
            raise UpstreamRejected(f"secret {ref.name!r} has no JSON key {ref.key!r}") from None
        except GetParameterError as exc:
            raise _classified(ref, exc.__context__) from None


def _classified(ref: SecretRef, cause: BaseException | None) -> Exception:
    """The error a failed read means for the stream: refused for good, or worth a retry.
    Powertools wraps the SDK's error; the original is the wrapper's context."""
    if isinstance(cause, ClientError):
        code = str(cause.response.get("Error", {}).get("Code", "ClientError"))
        if code in _PERMANENT:
            return UpstreamRejected(f"secret {ref.name!r} cannot be read ({code})")
        return SecretUnavailable(f"secret {ref.name!r} not read ({code})")
    return SecretUnavailable(f"secret {ref.name!r} not read ({type(cause).__name__})")
