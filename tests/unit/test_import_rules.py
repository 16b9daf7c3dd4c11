"""The import direction of architecture §2 holds: the import-linter contracts in pyproject.toml.

``lambdas → streamlease``, ``worker → streamlease``, ``cdk → streamlease`` (schema, indexes,
commands, settings, telemetry, errors and table_capacity only), ``local`` and ``bench →
everything``; ``streamlease`` imports none of the others. Inside the worker its folders import
one way (liveness → ownership → stream → sinks → fencing, with the process modules around them).
No package has an import cycle inside it.
``make lint`` runs ``lint-imports`` too; this test is what puts the contracts into ``make test``,
and so into CI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages under ``project``, with the repository's contracts."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            LINT_IMPORTS,
            "--no-cache",
            "--no-logo",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def reported(output: str) -> set[str]:
    """The ``importer -> imported`` pairs lint-imports lists under broken contracts."""
    return {
        line.strip(" -").split(" (l.")[0]
        for line in output.splitlines()
        if line.lstrip().startswith("- ") and " -> " in line
    }


def test_the_repository_keeps_every_contract() -> None:
    """No module of streamlease, worker, lambdas, cdk, local or bench imports across the rules,
    and none is part of an import cycle."""
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


WORKER_FOLDERS = ("liveness", "ownership", "stream", "sinks", "fencing")
WORKER_MODULES = (
    "__main__",
    "app",
    "context",
    "secrets",
    "blocking",
    "health",
    "identity",
    "lease_event_log",
    "metrics",
    "os_limits",
    "signals",
    "tracing",
    "logs",
)


def write_project(root: Path, files: dict[str, str]) -> None:
    """The six packages (empty) under ``root``, plus ``files`` (path: source)."""
    for package in ("streamlease", "worker", "lambdas", "cdk", "local", "bench"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    invariants = root / "local" / "invariants"  # the container of the one-way contract
    invariants.mkdir()
    for module in ("__init__", "checker", "ownership", "report", "inputs", "model"):
        (invariants / f"{module}.py").write_text("")
    for folder in WORKER_FOLDERS:  # the layers of the worker's one-way contract
        (root / "worker" / folder).mkdir()
        (root / "worker" / folder / "__init__.py").write_text("")
    for module in WORKER_MODULES:
        (root / "worker" / f"{module}.py").write_text("")
    for path, source in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(source)


def test_imports_against_the_direction_are_reported(tmp_path: Path) -> None:
    """Not vacuous: every kind of forbidden import is caught, including one inside a function
    and one under ``TYPE_CHECKING``, and a worker folder importing one above it; local may import
    anything, cdk may use the names and a worker folder may import those below it."""
    write_project(
        tmp_path,
        {
            "streamlease/schema.py": "",
            "streamlease/lease_store.py": "from streamlease import schema\n",
            "streamlease/bad.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import worker.app\n"
            ),
            "worker/app.py": "from streamlease import lease_store\n",
            "worker/bad.py": "def f():\n    from lambdas.api import handler\n",
            "worker/stream/link.py": "",
            "worker/fencing/fence.py": "import worker.stream.link\n",
            "worker/liveness/fleet.py": "import worker.ownership, worker.stream.link, worker.logs",
            "lambdas/api.py": "from streamlease.lease_store import LeaseStore\nhandler = None\n",
            "cdk/stack.py": "from streamlease import schema, lease_store\n",
            "local/stack.py": "import cdk.stack, lambdas.api, streamlease.schema, worker.app\n",
        },
    )

    result = lint_imports(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert reported(result.stdout) == {
        "streamlease.bad -> worker.app",
        "worker.bad -> lambdas.api",
        "worker.fencing.fence -> worker.stream.link",
        "cdk.stack -> streamlease.lease_store",
    }


def test_import_cycles_inside_a_package_are_reported(tmp_path: Path) -> None:
    """Not vacuous: two modules that import each other are a broken contract, also when one side
    imports only under ``TYPE_CHECKING``, and so are two folders whose modules do; a package
    importing its own module, and bench importing local, are not (local importing bench is)."""
    write_project(
        tmp_path,
        {
            "worker/sinks/__init__.py": "",
            "worker/sinks/sink.py": "from worker.sinks.packer import pack\n",
            "worker/sinks/packer.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from worker.sinks.sink import Entry\npack = None\n"
            ),
            "local/server.py": "import local.pages.dashboard\n",
            "local/pages/__init__.py": "",
            "local/pages/dashboard.py": "from local.server import Page\n",
            "bench/__init__.py": "import bench.model\n",
            "bench/model.py": "import local.server\n",
            "local/stack.py": "import bench.model\n",
        },
    )

    result = lint_imports(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert reported(result.stdout) >= {"local.stack -> bench.model"}
    assert cyclic_packages(result.stdout) == {"worker.sinks", "local"}


def cyclic_packages(output: str) -> set[str]:
    """The packages lint-imports names as holding an import cycle."""
    prefix = "No cycles are allowed in "
    return {
        line.strip().removeprefix(prefix).rstrip(".")
        for line in output.splitlines()
        if line.strip().startswith(prefix)
    }
