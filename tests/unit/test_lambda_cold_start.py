"""What a Lambda cold start imports: a handler module loads neither the AWS SDK nor Powertools'
OpenAPI models; the SDK comes with the first client, patched for X-Ray before it is used.

Each check runs in a fresh interpreter with the environment Lambda gives a function (where
Powertools' tracer is active), since what matters is what one import pulls in from nothing.
The time these imports take is measured by ``make bench`` (its Lambda section).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLERS = ("lambdas.api", "lambdas.reaper", "lambdas.auditor", "lambdas.consumer")
DEFERRED = (
    "boto3",
    "botocore.client",
    "s3transfer",
    "aws_lambda_powertools.event_handler.openapi.models",
)
"""Modules a handler's import must not load: the SDK (about 0.1 s) and the OpenAPI models
(with pydantic's network types, about 0.06 s), needed only once a request is answered."""

_LAMBDA_ENV = {
    "AWS_LAMBDA_FUNCTION_NAME": "cold-start",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
    "LAMBDA_TASK_ROOT": "/var/task",
    "AWS_REGION": "us-east-1",
}


def _run(script: str) -> dict[str, object]:
    """Run ``script`` in a fresh interpreter as Lambda would; it prints one JSON object."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO_ROOT), **_LAMBDA_ENV}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("handler", HANDLERS)
def test_importing_a_handler_loads_neither_the_sdk_nor_the_openapi_models(handler: str) -> None:
    loaded = _run(
        f"import json, sys, {handler}\n"
        f"print(json.dumps({{'loaded': [m for m in {DEFERRED!r} if m in sys.modules]}}))"
    )
    assert loaded == {"loaded": []}


def test_the_first_client_brings_the_sdk_patched_for_xray() -> None:
    state = _run(
        "import json, sys\n"
        "import lambdas.api\n"
        "from lambdas import runtime, tracing\n"
        "before = 'botocore.client' in sys.modules\n"
        "runtime.current().dynamodb\n"
        "import botocore.client\n"
        "from aws_xray_sdk.core import patcher\n"
        "wrapped = hasattr(botocore.client.BaseClient._make_api_call, '__wrapped__')\n"
        "print(json.dumps({'tracing': not tracing.tracer.disabled, 'sdk_before': before,\n"
        "                  'patched': sorted(patcher._PATCHED_MODULES), 'wrapped': wrapped}))"
    )
    assert state == {"tracing": True, "sdk_before": False, "patched": ["botocore"], "wrapped": True}
