"""Every "architecture §N" in the code, the README and docs/ names a section of docs/architecture.md
that exists, and the old form that pointed outside the repository is gone."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCUMENT = REPO / "docs" / "architecture.md"
SOURCES = ("streamlease", "worker", "lambdas", "cdk", "local", "tests", "bench", "docs")
TOP_LEVEL = ("README.md", "pyproject.toml", "Makefile")
SUFFIXES = {".py", ".md", ".json", ".toml", ".html", ".js"}

REFERENCE = re.compile(r"architecture §(\d+[a-z]?)((?:,? ?§\d+[a-z]?)*)")
HEADING = re.compile(r"^#{2,3} (\d+[a-z]?)\. ", re.MULTILINE)


def cited_files() -> list[Path]:
    found = [REPO / name for name in TOP_LEVEL]
    for folder in SOURCES:
        found += [
            path
            for path in (REPO / folder).rglob("*")
            if path.suffix in SUFFIXES and "__pycache__" not in path.parts
        ]
    return found


def references(text: str) -> list[str]:
    """``architecture §4a`` → ``4a``; ``architecture §5, §6`` → ``5`` and ``6``."""
    found = []
    for match in REFERENCE.finditer(text):
        found.append(match.group(1))
        found += re.findall(r"§(\d+[a-z]?)", match.group(2))
    return found


def test_the_document_has_the_numbered_sections() -> None:
    """§1 to §9, with §4a (sessions) and §4b (per-stream leases)."""
    sections = HEADING.findall(DOCUMENT.read_text(encoding="utf-8"))
    assert sections == ["1", "2", "3", "4", "4a", "4b", "5", "6", "7", "8", "9", "10"]


def test_every_reference_resolves_to_a_heading() -> None:
    """A reference to a section that does not exist is a broken promise to the reader."""
    sections = set(HEADING.findall(DOCUMENT.read_text(encoding="utf-8")))
    cited = {
        f"{path.relative_to(REPO)}: §{ref}"
        for path in cited_files()
        for ref in references(path.read_text(encoding="utf-8", errors="replace"))
        if ref not in sections
    }
    assert not cited, sorted(cited)
    assert references("architecture §5, §6 and architecture §4a") == ["5", "6", "4a"]


def test_no_reference_points_at_a_document_outside_the_repository() -> None:
    """The old form (the word DESIGN and a section number) named a page the repository lacks."""
    old = "DESIGN" + " §"
    stale = [
        str(p.relative_to(REPO)) for p in cited_files() if old in p.read_text(errors="replace")
    ]
    assert not stale


def test_the_license_file_matches_the_package_metadata() -> None:
    """pyproject says Apache-2.0; LICENSE is that licence's full text."""
    assert 'license = { text = "Apache-2.0" }' in (REPO / "pyproject.toml").read_text()
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
