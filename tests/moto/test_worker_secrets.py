"""The worker's secret references, read from Secrets Manager (the moto server) through Powertools
Parameters: cached for a while, read afresh after a refusal, refused for good when they can never
be read."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from streamlease import aws
from streamlease.errors import UpstreamRejected
from streamlease.profile import SecretRef
from streamlease.settings import Settings
from worker.secrets import Secrets


@pytest.fixture
def secrets_client(aws_settings: Settings) -> Any:
    return aws.client("secretsmanager", aws_settings)


@pytest.fixture
def name(secrets_client: Any) -> str:
    """A fresh JSON secret under the default prefix."""
    secret = f"streamlease/test-{uuid.uuid4().hex[:8]}"
    secrets_client.create_secret(Name=secret, SecretString=json.dumps({"token": "one"}))
    return secret


def _rotate(client: Any, name: str, token: str) -> None:
    client.put_secret_value(SecretId=name, SecretString=json.dumps({"token": token}))


async def test_a_value_is_reused_within_its_cache_time(
    aws_settings: Settings, secrets_client: Any, name: str
) -> None:
    """A fleet of streams sharing one secret does not read it per connection."""
    secrets = Secrets(aws_settings)
    ref = SecretRef(name, "token")
    assert await secrets.resolve([ref]) == {ref.text: "one"}
    _rotate(secrets_client, name, "two")
    assert await secrets.resolve([ref]) == {ref.text: "one"}


async def test_a_refused_secret_is_read_afresh_on_the_next_attempt(
    aws_settings: Settings, secrets_client: Any, name: str
) -> None:
    """After the upstream refused the handshake, a rotated secret is picked up at once."""
    secrets = Secrets(aws_settings)
    ref = SecretRef(name, "token")
    await secrets.resolve([ref])
    _rotate(secrets_client, name, "two")
    secrets.forget([ref])
    assert await secrets.resolve([ref]) == {ref.text: "two"}
    _rotate(secrets_client, name, "three")
    assert await secrets.resolve([ref]) == {ref.text: "two"}  # cached again


async def test_a_whole_secret_is_its_text(aws_settings: Settings, name: str) -> None:
    ref = SecretRef(name)
    assert json.loads((await Secrets(aws_settings).resolve([ref]))[ref.text]) == {"token": "one"}


@pytest.mark.parametrize(
    "ref",
    [
        SecretRef("streamlease/absent"),
        SecretRef("elsewhere/secret"),
    ],
)
async def test_a_secret_that_can_never_be_read_is_a_refusal(
    aws_settings: Settings, ref: SecretRef
) -> None:
    """Missing, or outside the prefix: the stream is rejected, not retried."""
    with pytest.raises(UpstreamRejected):
        await Secrets(aws_settings).resolve([ref])


async def test_a_missing_json_key_is_a_refusal_that_names_no_value(
    aws_settings: Settings, name: str
) -> None:
    with pytest.raises(UpstreamRejected) as refused:
        await Secrets(aws_settings).resolve([SecretRef(name, "password")])
    assert "one" not in str(refused.value)
    assert "password" in str(refused.value)
