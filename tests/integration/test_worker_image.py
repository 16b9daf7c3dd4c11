"""The worker image holds what ``python -m worker`` imports, and needs no other package.

Docker is not available in every test environment, so the test rebuilds the image's file tree
the way the Dockerfile does — the final stage's ``COPY <src> <dst>`` lines, minus what
``.dockerignore`` keeps out — in a temporary directory, and imports the worker from there alone
(the development install's path hook removed). Every distribution the import loads must be one
the Dockerfile installs, or a dependency of one.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "worker" / "Dockerfile"
OPTIONAL = frozenset({"certifi"})
"""Imported when present, not needed: botocore falls back to its own CA bundle."""

_PROBE = r"""
import json, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path_hooks[:] = [h for h in sys.path_hooks if "editable" not in repr(h).lower()]
sys.path_importer_cache.clear()
root = sys.argv[1]
at_start = set(sys.modules)  # site start-up (.pth hooks) is not the worker's doing
import worker.__main__, worker.app, worker.health, worker.sinks
import uvloop  # worker.__main__.main() runs the loop on it when installed, as in the image
# With tracing on (as on AWS), the OTLP exporter, the X-Ray id generator and propagator load.
from streamlease.settings import Settings
from worker.tracing import Tracing
tracing = Tracing.from_settings(Settings(trace_export="otlp"))
with tracing.acquire("s1", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0", source="x"):
    pass
from importlib import metadata
names = metadata.packages_distributions()
loaded = {
    dist
    for name in set(sys.modules) - at_start
    for dist in names.get(name.split(".")[0], [])
}
print(json.dumps({
    "worker": worker.__file__,
    "foreign": sorted(m for m in ("local", "lambdas", "cdk", "tests") if m in sys.modules),
    "distributions": sorted(loaded),
}))
"""


def final_stage_copies(dockerfile: str) -> list[tuple[str, str]]:
    """``(source, destination)`` of the last stage's COPY lines that copy from the context."""
    stages = re.split(r"(?im)^FROM\s", dockerfile)
    copies = []
    for line in stages[-1].splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not any(p.startswith("--from") for p in parts):
            copies.append((parts[-2], parts[-1]))
    return copies


def installed_requirements(dockerfile: str) -> set[str]:
    """Names of the packages the Dockerfile's ``pip install`` line asks for."""
    match = re.search(r"pip install(?P<args>(?:[^\n]*\\\n)*[^\n]*)", dockerfile)
    assert match, "no pip install in the Dockerfile"
    words = match.group("args").replace("\\\n", " ").split()
    names = set()
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
            continue
        if word in ("-c", "-r", "--prefix", "--constraint"):
            skip_next = True
            continue
        if word.startswith("-"):
            continue
        names.add(canonicalize_name(Requirement(word.strip("'\"")).name))
    return names


def dependency_closure(names: set[str]) -> set[str]:
    """``names`` and everything they require (per the installed metadata), transitively."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def ignored(relative: str, patterns: list[str]) -> bool:
    """True when ``.dockerignore``'s exclusions (``**/`` patterns) drop ``relative``."""
    parts = relative.split("/")
    for pattern in patterns:
        tail = pattern.removeprefix("**/")
        if any(fnmatch.fnmatch(part, tail) for part in parts):
            return True
    return False


def build_tree(target: Path) -> None:
    """Copy what the final stage copies into ``target``, as Docker would."""
    dockerignore = (REPO / ".dockerignore").read_text().splitlines()
    exclusions = [p.strip() for p in dockerignore if p.strip().startswith("**/")]
    for source, destination in final_stage_copies(DOCKERFILE.read_text()):
        src = REPO / source
        for path in src.rglob("*"):
            relative = path.relative_to(src).as_posix()
            if path.is_file() and not ignored(relative, exclusions):
                out = target / destination / relative
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)


def test_the_image_tree_runs_the_worker_with_only_the_installed_packages(tmp_path: Path) -> None:
    """``python -m worker`` imports from the copied tree alone (no ``local``, ``lambdas``...),
    and every third-party distribution it loads is installed by the Dockerfile."""
    dockerfile = DOCKERFILE.read_text()
    assert ("worker/", "worker/") in final_stage_copies(dockerfile)
    assert re.search(r'ENTRYPOINT \["python", "-m", "worker"\]', dockerfile)
    assert "worker.health" in dockerfile, "the image has a health check"
    build_tree(tmp_path)

    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert probe["worker"].startswith(str(tmp_path)), probe["worker"]
    assert probe["foreign"] == []
    allowed = dependency_closure(installed_requirements(dockerfile))
    loaded = {canonicalize_name(d) for d in probe["distributions"]} - {"streamlease"} - OPTIONAL
    assert loaded <= allowed, f"not installed by the image: {sorted(loaded - allowed)}"


def test_the_base_image_is_pinned_by_digest() -> None:
    """``FROM`` resolves to one exact base image: a tag plus the digest of its index."""
    dockerfile = DOCKERFILE.read_text()
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert match, "no default base image"
    assert re.fullmatch(r"python:3\.12-slim@sha256:[0-9a-f]{64}", match.group(1))
    assert all(
        line.split()[1].startswith("${PYTHON_IMAGE}")
        for line in dockerfile.splitlines()
        if line.startswith("FROM ")
    )
