"""``streamlease secret put NAME`` against a local stack: the secret lands in the stack's moto
server, where a worker resolves the header that refers to it; the value never reaches the
output; nothing needs installing or configuring on the user's side."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import boto3

from local.api_adapter import ApiAdapter, serving
from local.gateway_events import Page, json_response, load_resources
from local.moto_process import MotoProcess
from streamlease.cli import main
from streamlease.profile import parse_profile
from streamlease.settings import Settings
from worker.secrets import Secrets


def no_function(event: dict[str, Any], context: Any) -> Mapping[str, Any]:
    return {"statusCode": 200, "headers": {}, "body": "{}"}


def api_with(pages: dict[str, Page]) -> AbstractContextManager[str]:
    return serving(ApiAdapter(no_function, load_resources(), pages=pages))


def cli(*argv: str, stdin: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, stdin=io.StringIO(stdin), environ={})
    return code, out.getvalue(), err.getvalue()


def stored(moto_server: MotoProcess, name: str) -> str:
    client = boto3.client(
        "secretsmanager", region_name="us-east-1", endpoint_url=moto_server.endpoint_url
    )
    return str(client.get_secret_value(SecretId=name)["SecretString"])


async def test_a_secret_put_through_the_local_stack_is_what_the_worker_reads(
    moto_server: MotoProcess,
) -> None:
    """Created, then updated; the worker's header resolves to the latest value."""
    name = f"streamlease/meetings-{uuid.uuid4().hex[:8]}"
    description = {"moto_url": moto_server.endpoint_url, "aws_region": "us-east-1"}
    with api_with({"/local/stack": lambda _: json_response(description)}) as url:
        code, out, err = cli("--api", url, "secret", "put", name, stdin='{"token": "t0k-1"}\n')
        assert code == 0, err
        assert out == f"created secret {name} in the local stack's Secrets Manager (moto at " + (
            f"{moto_server.endpoint_url})\n"
        )
        code, out, _ = cli("--api", url, "--json", "secret", "put", name, stdin='{"token": "t2"}')
        assert code == 0
        assert "t2" not in out
        document = json.loads(out)  # the document every command that changes something prints
        assert [(r["id"], r["result"]) for r in document["results"]] == [(name, "updated")]
        assert f":secret:{name}" in document["results"][0]["arn"]
        assert (document["summary"]["total"], document["summary"]["updated"]) == (1, 1)
    assert stored(moto_server, name) == '{"token": "t2"}'  # one trailing newline dropped
    settings = Settings(aws_endpoint_url=moto_server.endpoint_url, aws_region="us-east-1")
    profile = parse_profile(
        {"headers": {"Authorization": f"Bearer {{secret:{name}#token}}"}},
        secrets_prefix=settings.secrets_prefix,
    )
    resolved = await Secrets(settings).resolve(profile.secrets)
    assert [(n, v.render(resolved)) for n, v in profile.headers] == [("Authorization", "Bearer t2")]


def test_an_api_that_is_no_local_stack_and_not_aws_is_refused() -> None:
    """Where secrets would go cannot be known: a clear error, nothing sent anywhere."""
    with api_with({}) as url:
        code, _, err = cli("--api", url, "secret", "put", "streamlease/x", stdin="v")
    assert code == 1
    assert "neither a local stack nor an execute-api URL" in err


def test_an_empty_value_is_refused(moto_server: MotoProcess) -> None:
    """Nothing on stdin is a mistake, not an empty secret."""
    description = {"moto_url": moto_server.endpoint_url, "aws_region": "us-east-1"}
    with api_with({"/local/stack": lambda _: json_response(description)}) as url:
        code, _, err = cli("--api", url, "secret", "put", "streamlease/empty", stdin="\n")
    assert code == 1
    assert "the value is empty" in err
