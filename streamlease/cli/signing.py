"""SigV4 signing of API Gateway (``execute-api``) requests with the standard credential chain."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from streamlease.errors import StreamleaseError

SERVICE: Final = "execute-api"

# <api id>.execute-api.<region>.amazonaws.com, the China partition, and private APIs reached
# through an interface endpoint (<api id>-<vpce id>.execute-api.<region>.vpce.amazonaws.com).
_EXECUTE_API_HOST: Final = re.compile(
    r"[a-z0-9-]+\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d+)\.(?:vpce\.)?amazonaws\.com(?:\.cn)?",
    re.IGNORECASE,
)


class CredentialsMissing(StreamleaseError):
    """No AWS credentials were found where the standard chain looks."""


def execute_api_region(url: str) -> str | None:
    """The AWS region of an ``execute-api`` URL, or ``None`` when the URL is not one."""
    host = urlsplit(url).hostname or ""
    match = _EXECUTE_API_HOST.fullmatch(host)
    return match.group(1).lower() if match else None


class SigV4Signer:
    """Adds SigV4 headers for ``execute-api`` in ``region``.

    Credentials come from ``boto3.Session().get_credentials()`` (environment, shared files, SSO,
    container or instance role) when the first request is signed; refreshable credentials are
    frozen per request so a long ``watch`` survives their rotation. Thread-safe.
    """

    def __init__(self, region: str, credentials: Any = None) -> None:
        self.region = region
        self._credentials = credentials
        self._lock = threading.Lock()

    def sign(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> dict[str, str]:
        """``headers`` plus ``Authorization``, ``X-Amz-Date`` (and ``X-Amz-Security-Token``).

        Raises :class:`CredentialsMissing` when the credential chain finds nothing.
        """
        with self._lock:  # the chain is searched once, not once per thread
            if self._credentials is None:
                self._credentials = boto3.Session().get_credentials()
            if self._credentials is None:
                raise CredentialsMissing(
                    "no AWS credentials found (environment, ~/.aws config, SSO or role); "
                    "the API at an execute-api URL needs IAM-signed requests"
                )
            credentials = self._credentials
        frozen = credentials.get_frozen_credentials()
        request = AWSRequest(method=method, url=url, data=body or b"", headers=dict(headers))
        SigV4Auth(frozen, SERVICE, self.region).add_auth(request)
        return {name: str(value) for name, value in request.headers.items()}
