"""Secrets a stream's handshake headers refer to, read from AWS Secrets Manager when connecting.

A profile's header value ``secret:<name>`` (or ``{secret:<name>}`` inside a value) names a
secret; its value is read here, just before a connection attempt, kept for a short while
(:data:`CACHE_SECONDS`) so a fleet of streams sharing one secret does not read it per stream,
and read again at once after the upstream refused a handshake (a rotated secret is picked up on
the next attempt). A value is never logged, stored, put in an error text or returned to anyone
but the handshake.

Only names under ``Settings.secrets_prefix`` are read (the IAM policy allows no more; the
check here makes a stray reference an explicit refusal instead of an access error).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from streamlease import aws
from streamlease.errors import UpstreamRejected
from streamlease.profile import Profile, SecretRef
from streamlease.settings import Settings
from worker.stream.link import HeadersUnavailable

if TYPE_CHECKING:
    from types_boto3_secretsmanager import SecretsManagerClient

CACHE_SECONDS: Final = 30.0
"""How long a secret's value is reused before it is read again."""
_PERMANENT: Final = frozenset({"ResourceNotFoundException", "AccessDeniedException"})


class SecretUnavailable(HeadersUnavailable):
    """A secret could not be read for now (throttled, unreachable): the connection attempt is
    retried with backoff."""


class Secrets:
    """Resolves a profile's headers, with a short cache per secret reference."""

    def __init__(self, settings: Settings, client: SecretsManagerClient | None = None) -> None:
        """``client``: a boto3 Secrets Manager client (default: built on first use)."""
        self._settings = settings
        self._client = client
        self._cache: dict[str, tuple[str, float]] = {}

    async def headers(self, profile: Profile) -> list[tuple[str, str]]:
        """The profile's handshake headers with every secret resolved.

        Raises :class:`UpstreamRejected` for a reference that can never be read (missing,
        denied, outside the prefix, no such JSON key), :class:`SecretUnavailable` otherwise.
        """
        refs = profile.secrets
        resolved = {ref.text: await self._value(ref) for ref in refs}
        return [(name, value.render(resolved)) for name, value in profile.headers]

    def forget(self, refs: Sequence[SecretRef]) -> None:
        """Read these secrets again next time (the upstream refused what they gave)."""
        for ref in refs:
            self._cache.pop(ref.text, None)

    async def _value(self, ref: SecretRef) -> str:
        cached = self._cache.get(ref.text)
        now = time.monotonic()
        if cached is not None and now - cached[1] < CACHE_SECONDS:
            return cached[0]
        prefix = self._settings.secrets_prefix
        if not prefix or not ref.secret_name().startswith(prefix):
            raise UpstreamRejected(f"secret {ref.name!r} is outside the allowed prefix")
        value = await asyncio.to_thread(self._read, ref)
        self._cache[ref.text] = (value, now)
        return value

    def _read(self, ref: SecretRef) -> str:
        if self._client is None:
            self._client = aws.client("secretsmanager", self._settings)
        try:
            response = self._client.get_secret_value(SecretId=ref.name)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "ClientError"))
            if code in _PERMANENT:
                raise UpstreamRejected(f"secret {ref.name!r} cannot be read ({code})") from None
            raise SecretUnavailable(f"secret {ref.name!r} not read ({code})") from None
        except BotoCoreError as exc:
            raise SecretUnavailable(
                f"secret {ref.name!r} not read ({type(exc).__name__})"
            ) from None
        text = response.get("SecretString")
        if not isinstance(text, str):
            raise UpstreamRejected(f"secret {ref.name!r} has no text value")
        if ref.key is None:
            return text
        try:
            document = json.loads(text)
            value = document[ref.key]
        except (ValueError, TypeError, KeyError):
            raise UpstreamRejected(f"secret {ref.name!r} has no JSON key {ref.key!r}") from None
        if not isinstance(value, str):
            raise UpstreamRejected(f"secret {ref.name!r} key {ref.key!r} is not text")
        return value
