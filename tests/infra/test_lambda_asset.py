"""The Lambda code asset: reproducible, compiled for the runtime, without the runtime's SDK.

``make test`` builds ``build/lambda.zip`` first (``make lambda``); these tests read it and build
it again from the same installed dependencies.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cdk import lambda_asset
from cdk.app import LAMBDA_ASSET, REPO_ROOT

DEPS = REPO_ROOT / "build" / "lambda-deps"
SIZE_BUDGET_BYTES = 5 * 1000 * 1000
"""The asset's budget, zipped."""
HASH_BASED_UNCHECKED = 0b01
"""``.pyc`` header flags (PEP 552): hash-based, source not checked."""

pytestmark = pytest.mark.skipif(
    not LAMBDA_ASSET.is_file() or not DEPS.is_dir(), reason="run `make lambda` first"
)


@pytest.fixture(scope="module")
def runtime_python() -> str | None:
    """The Python 3.12 the build compiles with (None: there is none on this machine)."""
    return lambda_asset.find_runtime_python()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entries(path: Path) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as zf:
        return {info.filename: info for info in zf.infolist()}


def test_two_builds_from_the_same_inputs_are_byte_identical(
    tmp_path: Path, runtime_python: str | None
) -> None:
    """Same dependencies and sources, other paths and file times: the same sha256."""
    sources = tmp_path / "checkout"
    for package in lambda_asset.SOURCE_PACKAGES:
        shutil.copytree(REPO_ROOT / package, sources / package)
    deps = tmp_path / "deps"
    shutil.copytree(DEPS, deps)
    for path in [*sources.rglob("*"), *deps.rglob("*")]:
        path.touch()  # later modification times than the originals

    first = lambda_asset.build(DEPS, tmp_path / "first.zip", python=runtime_python)
    second = lambda_asset.build(
        deps, tmp_path / "second.zip", python=runtime_python, sources=sources
    )
    assert _sha256(first) == _sha256(second)


def test_every_entry_has_the_fixed_time_and_mode_in_sorted_order() -> None:
    """Nothing of the build machine's clock or umask is in the zip."""
    entries = _entries(LAMBDA_ASSET)
    assert list(entries) == sorted(entries)
    for name, info in entries.items():
        assert info.date_time == lambda_asset.ZIP_EPOCH, name
        assert info.external_attr >> 16 == 0o100644, name


def test_the_asset_holds_no_sdk_the_runtime_provides() -> None:
    """boto3 and botocore come from the Lambda runtime, not from the asset."""
    tops = {name.split("/")[0] for name in _entries(LAMBDA_ASSET)}
    for package in ("boto3", "botocore", "s3transfer", "urllib3", "dateutil"):
        assert package not in tops
    assert {"aws_lambda_powertools", "pydantic", "streamlease", "lambdas"} <= tops


def test_the_asset_fits_its_size_budget() -> None:
    """At most 5 MB zipped (21.7 MB with the SDK and without bytecode)."""
    assert LAMBDA_ASSET.stat().st_size <= SIZE_BUDGET_BYTES


def test_every_module_has_unchecked_hash_bytecode_of_the_runtime_python(
    runtime_python: str | None,
) -> None:
    """Our modules carry ``__pycache__/*.cpython-312.pyc`` beside their source; the
    dependencies' modules are bytecode only; every ``.pyc`` is hash-based and unchecked, with
    the runtime Python's magic number."""
    if runtime_python is None:
        pytest.skip("no Python 3.12 here: the asset was built without bytecode")
    magic = bytes.fromhex(
        subprocess.run(
            [runtime_python, "-c", "import importlib.util as u; print(u.MAGIC_NUMBER.hex())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    entries = _entries(LAMBDA_ASSET)
    ours = lambda_asset.SOURCE_PACKAGES
    with zipfile.ZipFile(LAMBDA_ASSET) as zf:
        for name in entries:
            if name.endswith(".py"):
                assert name.startswith(tuple(f"{p}/" for p in ours)), (
                    f"source of a dependency: {name}"
                )
                folder, _, module = name.rpartition("/")
                assert f"{folder}/__pycache__/{module[:-3]}.cpython-312.pyc" in entries, name
            elif name.endswith(".pyc"):
                header = zf.read(name)[:8]
                assert header[:4] == magic, name
                assert int.from_bytes(header[4:8], "little") == HASH_BASED_UNCHECKED, name


def test_asset_requirements_are_what_the_handlers_need_less_the_runtime_sdk() -> None:
    """``ASSET_REQUIREMENTS`` (installed without dependencies) is the dependency closure of
    Powertools with its tracer and pydantic, minus what the runtime provides."""
    closure = _closure(["aws-lambda-powertools[tracer]", "pydantic"])
    provided = {canonicalize_name(n) for n in lambda_asset.RUNTIME_PROVIDED}
    assert {canonicalize_name(n) for n in lambda_asset.ASSET_REQUIREMENTS} == closure - provided


def _closure(requirements: list[str]) -> set[str]:
    """Names of ``requirements`` and everything they require (extras honoured), transitively,
    per the installed metadata."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        for spec in metadata.requires(name) or []:
            needed = Requirement(spec)
            extras = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in extras):
                todo.append(needed)
    return {name for name, _ in seen}
