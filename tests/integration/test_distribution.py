"""What ``pip install streamlease`` puts into site-packages: the ``streamlease`` package and its
console script, nothing else.

The applications (``worker``, ``lambdas``, ``local``, ``cdk``) run from a checkout, the worker
image or the Lambda asset, which copy them from the source tree. Installed as top-level packages
under such generic names they would shadow, or be shadowed by, other projects' modules.

The wheel is built from a copy of the checkout (without ``.venv``, ``build`` and other local
state), so the build neither writes into the working tree nor picks up what a previous build left.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # pip builds the wheel in a fresh build environment: 5 s or more

REPO = Path(__file__).resolve().parents[2]
LOCAL_STATE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "node_modules",
    "build",
    "cdk.out",
    ".local",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The project's wheel, built by pip as ``pip install .`` would build it."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(REPO, source, ignore=LOCAL_STATE)
    out = tmp / "out"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("streamlease-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def _top_level(archive: zipfile.ZipFile) -> set[str]:
    return {name.split("/")[0] for name in archive.namelist()}


def test_the_wheel_holds_only_the_streamlease_package(wheel: zipfile.ZipFile) -> None:
    """Top level of the wheel: ``streamlease/`` and the ``.dist-info``; no application folder."""
    top = _top_level(wheel)
    dist_info = {name for name in top if name.endswith(".dist-info")}
    assert len(dist_info) == 1, top
    assert top - dist_info == {"streamlease"}


def test_the_wheel_holds_every_subpackage_of_streamlease(wheel: zipfile.ZipFile) -> None:
    """Not only the top package: every ``streamlease`` module of the source tree is in the wheel."""
    source = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "streamlease").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert source, "no source found"
    assert source <= set(wheel.namelist())


def test_the_wheel_installs_the_streamlease_command(wheel: zipfile.ZipFile) -> None:
    """``[console_scripts] streamlease = streamlease.cli:main``, and nothing else on the path."""
    (entry_points,) = (n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(entry_points).decode())
    assert dict(parser["console_scripts"]) == {"streamlease": "streamlease.cli:main"}
    assert parser.sections() == ["console_scripts"]
