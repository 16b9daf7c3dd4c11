"""Lambda cold start: each handler's import as Lambda does it, from the built asset.

A fresh interpreter per import (Python 3.12 when the machine has one, as the runtime), with the
asset's directory first on ``sys.path`` and the runtime's SDK (boto3 and its dependencies,
compiled, as in ``/var/runtime``) after it, the environment variables that make Powertools'
tracer patch botocore as it does in Lambda, and no bytecode writing (``/var/task`` is
read-only). What is timed is the ``import`` of the handler module, the interpreter's own
start-up aside.

Two assets are compared, built by :mod:`cdk.lambda_asset` for *this* machine's platform (the
real one is arm64 and cannot load here; the Python files are the same): *before*, as the asset
was built until now (Powertools, pydantic and the whole SDK, no bytecode), and *after*, what
``make lambda`` builds now. They run interleaved A/B/A (after, before, after), 9 imports each.
The size and sha256 rows are of ``build/lambda.zip`` itself (arm64), built twice.

The API handler's own table times its import in 5 cold processes from the *after* asset, against
the goal, and in the same processes what the first request then pays for what the import no
longer loads: the SDK with the first DynamoDB and SQS clients (botocore patched for X-Ray), and
Powertools' OpenAPI models with the routes' document (a request with an undeclared query
parameter, refused before any AWS call).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Final

from bench.common import Table
from bench.context import BenchContext
from cdk import lambda_asset

HANDLERS: Final = ("api", "reaper", "auditor")
RUNS: Final = 9
QUICK_RUNS: Final = 3
API_HANDLER: Final = "lambdas.api"
API_RUNS: Final = 5
API_IMPORT_GOAL_SECONDS: Final = 0.3
HOST_PLATFORMS: Final = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
SDK: Final = ("boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "six", "jmespath")
BEFORE_REQUIREMENTS: Final = (*lambda_asset.ASSET_REQUIREMENTS, *SDK[:-1])
"""The previous asset's packages: Powertools with its tracer, pydantic and the SDK."""
_PROBE: Final = """
import sys, time
sys.path[:0] = sys.argv[1:3]
started = time.perf_counter()
__import__(sys.argv[3])
print(time.perf_counter() - started)
"""
_API_PROBE: Final = """
import json, sys, time
sys.path[:0] = sys.argv[1:3]
started = time.perf_counter()
import lambdas.api as api
imported = time.perf_counter()
from lambdas import runtime
runtime.current().dynamodb, runtime.current().sqs
clients = time.perf_counter()
class Context:
    function_name, memory_limit_in_mb, aws_request_id = "api", 512, "bench"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:api"
answer = api.handler({"httpMethod": "GET", "path": "/streams", "resource": "/{proxy+}",
    "headers": {}, "multiValueHeaders": {}, "queryStringParameters": {"bench": "1"},
    "multiValueQueryStringParameters": {"bench": ["1"]}, "pathParameters": None,
    "requestContext": {"requestId": "bench", "stage": "v1", "identity": {}}, "body": None,
    "isBase64Encoded": False}, Context())
answered = time.perf_counter()
assert answer["statusCode"] == 400, answer
print(json.dumps([imported - started, clients - imported, answered - clients]))
"""
"""Import the API handler, make its clients, answer one request refused by the routes' own
document; seconds of each step. No AWS call is made (clients are built, never used)."""
_LAMBDA_ENV: Final = {
    "LAMBDA_TASK_ROOT": lambda_asset.TASK_ROOT,
    "AWS_LAMBDA_FUNCTION_NAME": "bench",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
    "AWS_REGION": "us-east-1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_INVOKE_ENV: Final = {
    "_X_AMZN_TRACE_ID": (
        "Root=1-6749f3a4-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
    ),
    "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
}
"""What Lambda sets for an invoke: the trace the handler's segment joins."""


def run(ctx: BenchContext) -> list[Table]:
    """Build both assets for this machine, time every handler's import, report size and
    reproducibility of the real asset."""
    python = lambda_asset.find_runtime_python()
    interpreter = python or sys.executable
    work = ctx.work_dir / "lambda-imports"
    ctx.progress.update("installing the host-platform dependencies")
    runtime_sdk = _install(work / "runtime-sdk", SDK, compile_with=interpreter)
    after_deps = _install(work / "after-deps", lambda_asset.ASSET_REQUIREMENTS)
    before_deps = _install(work / "before-deps", BEFORE_REQUIREMENTS)
    ctx.progress.update("building the assets")
    after = _unzip(lambda_asset.build(after_deps, work / "after.zip", python=python), work)
    before = _unzip(lambda_asset.build(before_deps, work / "before.zip", python=None), work)

    runs = QUICK_RUNS if ctx.quick else RUNS
    timings: dict[tuple[str, str], list[float]] = {}
    for handler in HANDLERS:
        for label, tree in (("after", after), ("before", before), ("after", after)):
            ctx.progress.update(f"importing lambdas.{handler} ({label})")
            sdk = runtime_sdk if label == "after" else tree  # the asset's own SDK shadows it
            timings.setdefault((handler, label), []).extend(
                _import_seconds(interpreter, tree, sdk, f"lambdas.{handler}") for _ in range(runs)
            )

    imports = Table(
        f"Lambda handler import, fresh interpreter ({_version(interpreter)}), from the asset",
        ["handler", "before: median (min–max)", "after: median (min–max)", "runs A/B/A"],
        notes=[
            "before: Powertools, pydantic and the whole SDK in the asset, no bytecode (every "
            "cold start compiles); after: no SDK (the runtime's, compiled), unchecked-hash "
            "bytecode.",
            f"Assets built for this machine ({os.uname().machine}) by cdk.lambda_asset; the "
            "deployed one is the same files with arm64 wheels.",
            *([] if python else ["No Python 3.12 here: the venv's Python imported the assets."]),
        ],
    )
    for handler in HANDLERS:
        imports.add(
            f"lambdas.{handler}",
            _summary(timings[(handler, "before")]),
            _summary(timings[(handler, "after")]),
            f"{runs} / {runs} / {runs}",
        )
    ctx.progress.update(f"importing {API_HANDLER} in {API_RUNS} cold processes")
    api = _api_table(interpreter, after, runtime_sdk, python is not None)
    return [imports, api, _asset_table(python, work)]


def _api_table(python: str, tree: Path, sdk: Path, runtime_python: bool) -> Table:
    """The API handler's import in :data:`API_RUNS` cold processes, and what the first request
    pays in the same processes, against :data:`API_IMPORT_GOAL_SECONDS`."""
    steps = list(zip(*(_api_steps(python, tree, sdk) for _ in range(API_RUNS)), strict=True))
    imported = steps[0]
    verdict = "met" if statistics.median(imported) <= API_IMPORT_GOAL_SECONDS else "not met"
    table = Table(
        f"API handler cold start ({_version(python)}), {API_RUNS} cold processes",
        ["step", "median (min–max)", "spread"],
        notes=[
            f"Goal: {API_HANDLER} imports in ≤ {API_IMPORT_GOAL_SECONDS:g} s, median: "
            f"{statistics.median(imported):.3f} s ({verdict}).",
            "The import is Lambda's init phase; the next two rows are the first invoke's, work "
            "the import leaves to the request that needs it (boto3 and botocore with the first "
            "client, Powertools' OpenAPI models with the first request).",
            *([] if runtime_python else ["No Python 3.12 here: the venv's Python ran it."]),
        ],
    )
    for label, values in zip(
        (
            f"import {API_HANDLER} (init)",
            "first DynamoDB and SQS clients (SDK import, X-Ray patch)",
            "first request (routes' OpenAPI document)",
        ),
        steps,
        strict=True,
    ):
        table.add(label, _summary(values), f"{(max(values) - min(values)) * 1000:.0f} ms")
    return table


def _api_steps(python: str, tree: Path, sdk: Path) -> list[float]:
    """Seconds of each step of :data:`_API_PROBE` in a fresh ``python``."""
    env = {"PATH": os.environ.get("PATH", ""), **_LAMBDA_ENV, **_INVOKE_ENV}
    result = subprocess.run(
        [python, "-s", "-c", _API_PROBE, str(tree), str(sdk)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    steps: list[float] = json.loads(result.stdout.strip().splitlines()[-1])
    return steps


def _asset_table(python: str | None, work: Path) -> Table:
    """Size, file count and sha256 of two builds of the deployed (arm64) asset."""
    deps = lambda_asset.REPO_ROOT / "build" / "lambda-deps"
    table = Table("Lambda asset (arm64, as deployed)", ["", "value"])
    if not deps.is_dir():
        table.notes.append("build/lambda-deps missing: run `make lambda` first")
        return table
    first = lambda_asset.build(deps, work / "arm64-1.zip", python=python)
    second = lambda_asset.build(deps, work / "arm64-2.zip", python=python)
    with zipfile.ZipFile(first) as zf:
        infos = zf.infolist()
    table.add("zipped", f"{first.stat().st_size / 1e6:.2f} MB")
    table.add("unzipped", f"{sum(i.file_size for i in infos) / 1e6:.1f} MB in {len(infos)} files")
    table.add("sha256, build 1", _sha256(first))
    table.add("sha256, build 2", _sha256(second))
    table.notes.append(
        "Before: 21.7 MB zipped, 36 MB unzipped, 4,018 files, a new sha256 per build."
    )
    return table


def _install(target: Path, requirements: tuple[str, ...], compile_with: str | None = None) -> Path:
    """Install ``requirements`` (no dependencies) for this machine into ``target``."""
    if target.exists():
        shutil.rmtree(target)
    command = lambda_asset.pip_install_command(sys.executable, target, requirements, HOST_PLATFORMS)
    subprocess.run(command, check=True, capture_output=True)
    if compile_with is not None:
        subprocess.run(
            [compile_with, "-m", "compileall", "-q", str(target)], check=True, capture_output=True
        )
    return target


def _unzip(archive: Path, work: Path) -> Path:
    tree = Path(tempfile.mkdtemp(prefix=archive.stem + "-", dir=work))
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tree)
    return tree


def _import_seconds(python: str, tree: Path, sdk: Path, module: str) -> float:
    """Seconds a fresh ``python`` takes to import ``module`` from ``tree`` (then ``sdk``)."""
    env = {"PATH": os.environ.get("PATH", ""), **_LAMBDA_ENV}
    result = subprocess.run(
        [python, "-s", "-c", _PROBE, str(tree), str(sdk), module],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return float(result.stdout.strip().splitlines()[-1])


def _summary(values: list[float]) -> str:
    return (
        f"{statistics.median(values) * 1000:.0f} ms "
        f"({min(values) * 1000:.0f}–{max(values) * 1000:.0f})"
    )


def _version(python: str) -> str:
    out = subprocess.run([python, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or python


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
