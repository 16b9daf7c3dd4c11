"""boto3 clients built from :class:`Settings`: one place for endpoints, region and timeouts.

Low-level clients are thread-safe, so one client per process is shared by every thread.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from streamlease.settings import Settings


def client(
    service: str,
    settings: Settings,
    *,
    read_timeout_seconds: float | None = None,
    max_attempts: int = 3,
) -> Any:
    """A boto3 client for ``service`` (``dynamodb``, ``sqs``, ``kinesis``, ...).

    ``read_timeout_seconds`` defaults to ``settings.dynamodb_timeout_seconds``; an SQS long poll
    needs more than its wait time. Retries use botocore's ``standard`` mode, ``max_attempts``
    attempts in all, the first included (1: no retry behind the caller's back, for callers that
    must not send after a deadline). botocore's own ``max_attempts`` key counts *retries*; this
    sets ``total_max_attempts``, which counts attempts.
    """
    timeout = (
        settings.dynamodb_timeout_seconds if read_timeout_seconds is None else read_timeout_seconds
    )
    config = Config(
        connect_timeout=settings.dynamodb_timeout_seconds,
        read_timeout=timeout,
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        max_pool_connections=64,
    )
    return boto3.session.Session().client(
        service,
        region_name=settings.aws_region,
        endpoint_url=settings.aws_endpoint_url or None,
        config=config,
    )
