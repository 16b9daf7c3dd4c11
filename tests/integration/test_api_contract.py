"""The local API keeps its OpenAPI document: schemathesis generates requests from
``lambdas/openapi.json`` and checks every answer (no 5xx; status, content type, headers and
body as documented; invalid requests refused; created streams readable and deleted ones gone).

It runs the ``st`` command line against a real local API process (the API Gateway adapter and
the handler) on the moto server, with a fixed seed and a bounded number of examples per
operation so that it stays short and repeatable; run ``st`` by hand for a longer search. The
local API stands in for IAM instead of checking SigV4 signatures, so the run uses the document
without its security requirement; the checks that do not apply are in :data:`EXCLUDED_CHECKS`,
and the statuses that count as refusing an invalid request in ``schemathesis.toml``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from local.moto_process import MotoProcess
from local.resources import create_resources
from local.worker_process import ApiProcess
from streamlease.settings import Settings

pytestmark = pytest.mark.slow

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
DOCUMENT: Final = REPO_ROOT / "lambdas" / "openapi.json"
CONFIG: Final = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES: Final = 25
"""Examples per operation and phase: about 30 s on two cores, and it finds what it finds early."""
SEED: Final = 20261130
RUN_TIMEOUT_SECONDS: Final = 300
EXCLUDED_CHECKS: Final = {
    "positive_data_acceptance": (
        "the schema cannot say everything the API checks: a ws_url of the right shape may name "
        "a host the URL policy refuses, a next_token of the right length may be garbage; both "
        "are 400s by design"
    ),
    "unsupported_method": (
        "like API Gateway, the API answers a method a resource lacks with its JSON 403 Missing "
        "Authentication Token, not 405 (tests/unit/test_api_adapter.py checks that answer)"
    ),
}
"""Checks of ``--checks all`` that do not apply to this API, with the reason."""


@pytest.fixture
def local_api(moto_server: MotoProcess, tmp_path: Path) -> Iterator[str]:
    """A local API process on fresh resources, with the local stack's URL policy; its URL."""
    settings = Settings(
        aws_endpoint_url=moto_server.endpoint_url,
        aws_region="us-east-1",
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
    )
    settings = create_resources(settings, prefix=f"contract-{tmp_path.name[-24:]}")
    api = ApiProcess.start(settings, tmp_path / "api.log")
    try:
        yield api.url
    finally:
        api.stop()


def document_without_auth(path: Path) -> Path:
    """The API document minus its SigV4 requirement, written to ``path``."""
    document: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    document.pop("security", None)
    document.get("components", {}).pop("securitySchemes", None)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_every_documented_answer_holds(local_api: str, tmp_path: Path) -> None:
    """Schemathesis finds no server error and no answer the document does not describe."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(CONFIG),
        "--no-color",
        "run",
        str(document_without_auth(tmp_path / "openapi.json")),
        "--url",
        local_api,
        "--checks",
        "all",
        "--exclude-checks",
        ",".join(EXCLUDED_CHECKS),
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--request-timeout",
        "10",
    ]
    run = subprocess.run(
        command,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20_000:]
    paths = json.loads(DOCUMENT.read_text())["paths"].values()
    operations = sum(1 for path in paths for method in path if method != "parameters")
    assert f"Tested: {operations}" in report, report[-5_000:]
