"""Process-wide state shared by the Lambda handlers: settings, clients and stores.

Settings are read once, when this module is first imported. boto3 clients are made on first use
(and boto3 imported then, and botocore patched for X-Ray), so importing a handler module never
needs AWS credentials or a reachable endpoint, and costs a cold start no SDK import. Tests and the
local stack may call :func:`configure` to swap in other settings; it drops every cached client.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

from lambdas.stream_listing import StreamListing
from lambdas.stream_repo import StreamRepo
from lambdas.tracing import patch_clients
from streamlease import aws
from streamlease.lease_store import LeaseStore
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from streamlease.url_policy import UrlPolicy

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_secretsmanager import SecretsManagerClient
    from types_boto3_sqs import SQSClient


class Runtime:
    """Everything a handler needs, built lazily from one :class:`Settings`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        """The process's DynamoDB client (thread-safe, shared)."""
        patch_clients()
        return aws.client("dynamodb", self.settings)

    @cached_property
    def sqs(self) -> SQSClient:
        """The process's SQS client."""
        patch_clients()
        return aws.client("sqs", self.settings)

    @cached_property
    def secretsmanager(self) -> SecretsManagerClient:
        """The client that checks the secrets a profile refers to exist (one attempt: a
        warning is not worth a retry)."""
        patch_clients()
        return aws.client("secretsmanager", self.settings, max_attempts=1)

    @cached_property
    def repo(self) -> StreamRepo:
        """Control-plane writes and reads of stream items."""
        return StreamRepo(
            self.dynamodb,
            self.settings.table_name,
            clock_skew_ms=self.settings.clock_skew_ms,
            liveness=self.settings.liveness,
        )

    @cached_property
    def listing(self) -> StreamListing:
        """Pages of streams (``GET /streams``)."""
        return StreamListing(self.dynamodb, self.settings.table_name)

    @cached_property
    def leases(self) -> LeaseStore:
        """The lease store (releases, owner lookups)."""
        return LeaseStore(
            self.dynamodb,
            self.settings.table_name,
            clock_skew_ms=self.settings.clock_skew_ms,
            liveness=self.settings.liveness,
        )

    @cached_property
    def sessions(self) -> SessionStore:
        """Worker items (sessions): the fleet, tombstones."""
        return SessionStore(self.dynamodb, self.settings.table_name)

    @cached_property
    def url_policy(self) -> UrlPolicy:
        """The upstream URL policy from the settings."""
        return UrlPolicy.from_settings(self.settings)


_lock = threading.Lock()
_current = Runtime(Settings.from_env())


def current() -> Runtime:
    """The runtime handlers use now."""
    return _current


def configure(settings: Settings) -> Runtime:
    """Replace the settings (tests, the local stack); clients are rebuilt on next use."""
    global _current
    with _lock:
        _current = Runtime(settings)
    return _current
