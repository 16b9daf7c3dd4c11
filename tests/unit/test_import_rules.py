"""The import direction of DESIGN §2, checked on the source of every package.

``lambdas → streamlease``, ``worker → streamlease``, ``cdk → streamlease`` (schema, settings and
telemetry only), ``local → everything``. ``streamlease`` imports none of the others, so the Lambda
bundle and the worker image carry only what they need and the CDK app never drags in runtime code.
Every ``import`` counts, including those inside functions and ``if TYPE_CHECKING:`` blocks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = frozenset({"streamlease", "worker", "lambdas", "local", "cdk"})
ALLOWED = {
    "streamlease": frozenset(),
    "worker": frozenset({"streamlease"}),
    "lambdas": frozenset({"streamlease"}),
    "cdk": frozenset({"streamlease"}),
    "local": PROJECT_PACKAGES,
}
CDK_STREAMLEASE_MODULES = frozenset({"schema", "settings", "telemetry", "errors"})


def imported_modules(source: str, filename: str = "<source>") -> set[str]:
    """Absolute dotted names imported by ``source`` (``from a import b`` yields ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def package_imports(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """For every ``.py`` file under ``root/package``: the project modules it imports."""
    result = {}
    for path in sorted((root / package).rglob("*.py")):
        modules = imported_modules(path.read_text(encoding="utf-8"), str(path))
        result[str(path.relative_to(root))] = {
            name for name in modules if name.split(".")[0] in PROJECT_PACKAGES
        }
    return result


def violations(package: str, root: Path = ROOT) -> list[str]:
    """Imports of ``package`` that break the rules, as ``file: module`` lines."""
    found = []
    for filename, modules in package_imports(package, root).items():
        for module in sorted(modules):
            top, _, rest = module.partition(".")
            if top == package:
                continue
            if top not in ALLOWED[package]:
                found.append(f"{filename}: {module}")
            elif package == "cdk" and rest.split(".")[0] not in CDK_STREAMLEASE_MODULES:
                found.append(f"{filename}: {module} (cdk may import only names and settings)")
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_respects_the_import_direction(package):
    """No file of the package imports a project package it must not depend on."""
    assert (ROOT / package).is_dir(), f"{package}/ is missing"
    assert violations(package) == []


def test_the_real_source_is_what_gets_checked():
    """Not vacuous: the shared package's files are found with their project imports."""
    files = package_imports("streamlease")
    assert "streamlease.schema.PK" in files["streamlease/lease_store.py"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import worker.main", {"worker.main"}),
        ("import lambdas as l, os", {"lambdas", "os"}),
        ("from local.moto_process import MotoProcess", {"local.moto_process.MotoProcess"}),
        ("from streamlease import telemetry", {"streamlease.telemetry"}),
        ("def f():\n    from worker import x\n", {"worker.x"}),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import cdk\n",
            {"typing.TYPE_CHECKING", "cdk"},
        ),
        ("from . import sibling\nfrom .x import y", set()),
    ],
)
def test_imports_are_found_wherever_they_are_written(source, expected):
    """Top-level, aliased, nested and type-checking imports all count; relative ones stay inside."""
    assert imported_modules(source) == expected


def test_a_forbidden_import_is_reported(tmp_path):
    """A worker module importing lambdas is caught, with its file name."""
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "bad.py").write_text("from lambdas.api import handler\n")

    assert violations("worker", tmp_path) == ["worker/bad.py: lambdas.api.handler"]


def test_cdk_may_not_import_the_lease_store(tmp_path):
    """The CDK app uses schema names, settings names and metric names, nothing with behaviour."""
    (tmp_path / "cdk").mkdir()
    (tmp_path / "cdk" / "stack.py").write_text(
        "from streamlease.schema import PK\nfrom streamlease.lease_store import LeaseStore\n"
    )

    assert violations("cdk", tmp_path) == [
        "cdk/stack.py: streamlease.lease_store.LeaseStore (cdk may import only names and settings)"
    ]


INVARIANTS_IMPORTS = {
    "model": frozenset(),
    "report": frozenset({"model"}),
    "ownership": frozenset({"model"}),
    "inputs": frozenset(),
    "checker": frozenset({"model", "ownership", "inputs"}),
}


def test_the_invariant_checker_modules_import_one_way():
    """Inside local/invariants/ no module imports one that imports it back (no import circle):
    model and inputs stand alone, report and ownership build on model, checker on the rest."""
    package = ROOT / "local" / "invariants"
    assert {p.stem for p in package.glob("*.py")} == {"__init__", *INVARIANTS_IMPORTS}
    for name, allowed in INVARIANTS_IMPORTS.items():
        source = (package / f"{name}.py").read_text(encoding="utf-8")
        siblings = {
            module.split(".")[2]
            for module in imported_modules(source)
            if module.startswith("local.invariants.")
        }
        assert siblings <= allowed, f"local/invariants/{name}.py imports {siblings - allowed}"
