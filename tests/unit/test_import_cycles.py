"""No module of the first-party packages takes part in an import cycle, however it imports.

The ``acyclic`` import-linter contract (pyproject.toml) finds cycles between the modules and
sub-packages of one package; this test finds every cycle of the whole module graph, including
one through a package's own ``__init__`` (a package importing its module, which imports the
package back), which that contract does not see. Both count imports inside functions and under
``TYPE_CHECKING``. ``make lint`` runs this file too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

FIRST_PARTY = ("streamlease", "worker", "lambdas", "local", "cdk", "bench")


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The cycles of ``graph`` (module → modules it imports): each set of modules that all reach
    one another, sorted, when it has more than one module. Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == module:
                    break
            if len(members) > 1:
                cycles.append(sorted(members))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def import_cycles(*packages: str) -> list[list[str]]:
    """The import cycles among the modules of ``packages`` (importable from ``sys.path``)."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    return strongly_connected(
        {
            module: sorted(graph.find_modules_directly_imported_by(module))
            for module in graph.modules
        }
    )


def describe(cycles: list[list[str]], packages: Iterable[str]) -> str:
    """One line a cycle, with the imports that close it, for the failure message."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    lines = []
    for members in cycles:
        inside = set(members)
        arrows = [
            f"{m} -> {i}"
            for m in members
            for i in sorted(graph.find_modules_directly_imported_by(m))
            if i in inside
        ]
        lines.append(f"cycle of {len(members)}: " + "; ".join(arrows))
    return "\n".join(lines)


def test_the_first_party_packages_have_no_import_cycle() -> None:
    """Move what two modules both need down into a third that both import."""
    cycles = import_cycles(*FIRST_PARTY)
    assert cycles == [], describe(cycles, FIRST_PARTY)


def test_cycles_are_found_whatever_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not vacuous: a cycle of two sibling modules, one whose one side imports only under
    ``TYPE_CHECKING``, and one through a package's ``__init__`` are each found; an import that
    goes one way only is not a cycle."""
    files = {
        "cyc_pkg/__init__.py": "",
        "cyc_pkg/one.py": "import cyc_pkg.two\n",
        "cyc_pkg/two.py": "def f():\n    import cyc_pkg.one\n",
        "cyc_pkg/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from cyc_pkg.hints import Hint\n",
        "cyc_pkg/hints.py": "import cyc_pkg.typed\nHint = int\n",
        "cyc_pkg/sub/__init__.py": "from cyc_pkg.sub.leaf import value\n",
        "cyc_pkg/sub/leaf.py": "import cyc_pkg.sub\nvalue = 1\n",
        "cyc_pkg/below.py": "import cyc_pkg.one\n",
    }
    for path, source in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cyc_pkg", raising=False)

    assert import_cycles("cyc_pkg") == [
        ["cyc_pkg.hints", "cyc_pkg.typed"],
        ["cyc_pkg.one", "cyc_pkg.two"],
        ["cyc_pkg.sub", "cyc_pkg.sub.leaf"],
    ]
