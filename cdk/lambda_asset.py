"""The Lambda code asset (``build/lambda.zip``): built without Docker, compiled, reproducible.

``python -m cdk.lambda_asset --deps DIR --out ZIP`` (what ``make lambda`` runs) zips, for the
Python 3.12 arm64 runtime:

- the handlers' third-party packages (:data:`ASSET_REQUIREMENTS`, installed by ``make`` from
  wheels for the runtime's platform at the versions ``requirements.lock`` pins) — but not the AWS
  SDK: the runtime has boto3 and botocore (:data:`RUNTIME_PROVIDED`), which would be 80 % of the
  asset;
- ``streamlease/`` and ``lambdas/`` from the source tree;
- bytecode for every module, compiled by a Python 3.12 interpreter (the runtime's bytecode
  format) as *unchecked-hash* ``.pyc`` files: ``/var/task`` is read-only, so without them every
  cold start compiles every module it imports; a hash-based ``.pyc`` does not depend on the
  source's modification time (the zip sets every timestamp to 1980, below), and an unchecked
  one is never compared with its source at import (the asset is immutable).
  Our packages keep their sources beside (``__pycache__``); the dependencies ship as bytecode
  alone, in place of their sources, which keeps the asset under 5 MB (their tracebacks name
  file and line without the source text).

The zip is reproducible: entries in sorted order, every timestamp 1980-01-01, fixed permissions,
one compression level, bytecode compiled with a fixed hash seed (set and frozenset constants are
ordered by string hashes) and tracebacks naming ``/var/task/...``. The same inputs give the
same sha256 (``tests/infra/test_lambda_asset.py``), so CloudFormation sees an unchanged asset
and updates no function. The same zlib is assumed: another zlib may compress differently.

Without a Python 3.12 interpreter the asset is built without bytecode (a warning says so): it
still works, and cold starts compile at import.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

RUNTIME_VERSION: Final = (3, 12)
"""The Lambda runtime's Python (``lambda_.Runtime.PYTHON_3_12``)."""
RUNTIME_PLATFORMS: Final = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
"""Wheel platform tags of the runtime (Amazon Linux 2023 on arm64)."""
ASSET_REQUIREMENTS: Final = (
    "aws-lambda-powertools",
    "aws-xray-sdk",
    "wrapt",
    "jmespath",
    "typing-extensions",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
)
"""What the handlers import beyond the standard library and the runtime's SDK: Powertools
(logger, metrics, tracer, event handler), the X-Ray SDK its tracer drives, and pydantic for the
API's validation. Installed without their dependencies (``--no-deps``), so the SDK that
aws-xray-sdk and Powertools declare is not pulled in; a test checks that this list is the
dependency closure of ``aws-lambda-powertools[tracer]`` and ``pydantic`` less
:data:`RUNTIME_PROVIDED`."""
RUNTIME_PROVIDED: Final = ("boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "six")
"""Distributions in the Lambda Python runtime (the AWS SDK and its dependencies). jmespath is
one too, but stays in the asset: Powertools needs it whatever SDK version the runtime has."""
REPO_ROOT: Final = Path(__file__).resolve().parent.parent
SOURCE_PACKAGES: Final = ("streamlease", "lambdas")
TASK_ROOT: Final = "/var/task"
"""Where Lambda puts the asset; compiled code names its files there."""
ZIP_EPOCH: Final = (1980, 1, 1, 0, 0, 0)
"""The earliest timestamp a zip entry can hold."""
COMPRESS_LEVEL: Final = 9
HASH_SEED: Final = "0"
UNREACHABLE: Final = (
    "bin",  # console scripts of the wheels: nothing runs them in Lambda
    "**/*.pyi",  # type stubs: for type checkers only
    "**/*.c",  # C sources of extension modules that ship compiled
    "wrapt-stubs",
    "pydantic/mypy.py",  # pydantic's plugin for mypy
    # The Swagger UI's script and style sheet, served only by enable_swagger(), which the API
    # does not call (its OpenAPI document is lambdas/openapi.json).
    "aws_lambda_powertools/event_handler/openapi/swagger_ui/*.min.*",
)
"""Files of the dependencies that no handler can reach, left out of the asset (globs relative
to the installed dependencies)."""
_SKIPPED_NAMES: Final = ("__pycache__", ".installed")
UNREACHABLE_SOURCES: Final = ("streamlease/cli",)
"""Parts of the source packages that no handler imports, left out of the asset: the command
line ships with the pip package (``pip install streamlease``), not in a function."""


def find_runtime_python(explicit: str | None = None) -> str | None:
    """A Python 3.12 interpreter to compile with: ``explicit`` if given (it must be 3.12),
    else ``python3.12`` on ``PATH``, else one installed by pyenv or uv. None when there is none.

    Raises ``ValueError`` when ``explicit`` is not a working Python 3.12.
    """
    if explicit:
        if not _is_runtime_python(explicit):
            raise ValueError(f"{explicit} is not a working Python {_dotted(RUNTIME_VERSION)}")
        return explicit
    home = Path.home()
    version = _dotted(RUNTIME_VERSION)
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(glob.glob(str(home / f".pyenv/versions/{version}*/bin/python{version}"))),
        *sorted(glob.glob(str(home / f".local/share/uv/python/cpython-{version}*/bin/python3"))),
    ]
    return next((c for c in candidates if c and _is_runtime_python(c)), None)


def _dotted(version: Sequence[int]) -> str:
    return ".".join(map(str, version))


def _is_runtime_python(executable: str) -> bool:
    """True if ``executable`` runs and is the runtime's Python (a pyenv shim may not run)."""
    try:
        result = subprocess.run(  # noqa: S603 - an interpreter the operator or PATH named
            [executable, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return result.returncode == 0 and result.stdout.split() == list(map(str, RUNTIME_VERSION))


def stage(deps: Path, sources: Path, target: Path) -> None:
    """Lay out the asset's files in ``target``: the installed dependencies less
    :data:`UNREACHABLE`, then the source packages less :data:`UNREACHABLE_SOURCES` (never a
    ``__pycache__`` of the build machine's Python)."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for entry in sorted(deps.iterdir()):
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name)
        else:
            shutil.copy2(entry, target / entry.name)
    for pattern in (*UNREACHABLE, *(f"**/{name}" for name in _SKIPPED_NAMES)):
        for path in sorted(target.glob(pattern), reverse=True):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    ignore = shutil.ignore_patterns(*_SKIPPED_NAMES)
    for package in SOURCE_PACKAGES:
        shutil.copytree(sources / package, target / package, ignore=ignore)
    for part in UNREACHABLE_SOURCES:
        shutil.rmtree(target / part)


def compile_bytecode(tree: Path, python: str) -> None:
    """Compile every module under ``tree`` with ``python`` into unchecked-hash ``.pyc`` files
    whose code objects name their source under :data:`TASK_ROOT`: the source packages' into
    ``__pycache__`` beside their sources, the dependencies' in place of their sources.

    Raises ``subprocess.CalledProcessError`` if a module does not compile.
    """
    ours = [tree / package for package in SOURCE_PACKAGES]
    theirs = sorted(p for p in tree.iterdir() if p not in ours and _compilable(p))
    _compileall(python, tree, ours, legacy=False)
    _compileall(python, tree, theirs, legacy=True)
    for compiled in sorted(tree.rglob("*.pyc")):
        source = compiled.with_suffix(".py")
        if "__pycache__" not in compiled.parts and source.is_file():
            source.unlink()


def _compilable(path: Path) -> bool:
    return path.is_dir() or path.suffix == ".py"


def _compileall(python: str, tree: Path, paths: Sequence[Path], *, legacy: bool) -> None:
    """``python -m compileall`` over ``paths`` with a fixed hash seed (so set constants are
    ordered alike in every build); ``legacy``: ``module.pyc`` beside the source instead of in
    ``__pycache__``, which Python loads without the source."""
    if not paths:
        return
    command = [
        python,
        "-s",  # no user site; not -I or -E, which would ignore PYTHONHASHSEED
        "-m",
        "compileall",
        "-q",
        "-r",
        "100",
        "-s",
        str(tree),
        "-p",
        TASK_ROOT,
        "--invalidation-mode",
        "unchecked-hash",
        *(["-b"] if legacy else []),
        *map(str, paths),
    ]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": HASH_SEED}
    subprocess.run(command, env=env, check=True)  # noqa: S603 - the runtime's compileall


def files_of(tree: Path) -> Iterator[Path]:
    """Every file under ``tree``, in the order the zip lists them (by their names in it)."""
    return iter(
        sorted((p for p in tree.rglob("*") if p.is_file()), key=lambda p: str(p.relative_to(tree)))
    )


def write_zip(tree: Path, out: Path) -> None:
    """Zip ``tree`` into ``out`` deterministically (order, timestamps, permissions, level)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL) as zf:
        for path in files_of(tree):
            info = zipfile.ZipInfo(path.relative_to(tree).as_posix(), date_time=ZIP_EPOCH)
            info.create_system = 3  # Unix, so the permission bits below are honoured
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes(), compresslevel=COMPRESS_LEVEL)
    partial.replace(out)


def build(deps: Path, out: Path, *, python: str | None, sources: Path | None = None) -> Path:
    """Build the asset zip at ``out`` from installed dependencies ``deps`` and the source tree
    ``sources`` (default: this repository); ``python``: the 3.12 interpreter that compiles the
    bytecode, or None for an asset without it. Returns ``out``."""
    root = sources or REPO_ROOT
    with tempfile.TemporaryDirectory(prefix="lambda-asset-") as scratch:
        tree = Path(scratch) / "task"
        stage(deps, root, tree)
        if python is not None:
            compile_bytecode(tree, python)
        write_zip(tree, out)
    return out


def pip_install_command(
    python: str, target: Path, requirements: Iterable[str], platforms: Sequence[str]
) -> list[str]:
    """The ``pip install`` that puts ``requirements`` (no dependencies of theirs) for the
    runtime's Python and ``platforms`` into ``target``, at the versions the lock pins."""
    version = _dotted(RUNTIME_VERSION)
    platform_args = [arg for tag in platforms for arg in ("--platform", tag)]
    return [
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--no-deps",
        "--target",
        str(target),
        "--implementation",
        "cp",
        "--python-version",
        version,
        "--only-binary=:all:",
        *platform_args,
        "-c",
        str(REPO_ROOT / "requirements.lock"),
        *requirements,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--install-deps`` fills ``--deps``; otherwise zip the asset."""
    parser = argparse.ArgumentParser(prog="python -m cdk.lambda_asset", description=__doc__)
    parser.add_argument("--deps", type=Path, required=True, help="installed dependencies")
    parser.add_argument("--out", type=Path, help="the zip to write")
    parser.add_argument("--python", help="a Python 3.12 to compile with (default: found)")
    parser.add_argument(
        "--install-deps", action="store_true", help="install the dependencies into --deps"
    )
    args = parser.parse_args(argv)
    if args.install_deps:
        if args.deps.exists():
            shutil.rmtree(args.deps)
        command = pip_install_command(
            sys.executable, args.deps, ASSET_REQUIREMENTS, RUNTIME_PLATFORMS
        )
        return subprocess.run(command, check=False).returncode  # noqa: S603 - pip, fixed arguments
    if args.out is None:
        parser.error("--out is required to build the zip")
    python = find_runtime_python(args.python)
    if python is None:
        print(
            f"warning: no Python {_dotted(RUNTIME_VERSION)} found (python3.12 on PATH, pyenv or"
            " uv): the asset has no bytecode, so every cold start compiles its modules",
            file=sys.stderr,
        )
    build(args.deps, args.out, python=python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
