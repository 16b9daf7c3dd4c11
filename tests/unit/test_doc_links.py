"""Every relative link of README.md and docs/*.md points at a file that exists, and a link with
an anchor at a heading of that page (as GitHub names headings). The site build checks the same
for the site (tests/docs/test_docs_site.py); this check also covers links that leave docs/."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but ``-`` and
    ``_`` removed, each space a ``-``."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    return {slug(h) for h in HEADING.findall(text)}


def links(page: Path) -> list[str]:
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans hold no links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def broken(page: Path, root: Path = REPO) -> list[str]:
    """What is wrong with the links of ``page``, one line each (paths relative to ``root``)."""
    found = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            found.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            found.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return found


def test_every_relative_link_resolves() -> None:
    problems = [problem for page in pages() for problem in broken(page)]
    assert not problems, "\n".join(problems)


def test_the_readme_links_every_page_of_the_docs() -> None:
    """The README's map reaches every page: none stands where no reader finds it."""
    linked = {t.partition("#")[0] for t in links(REPO / "README.md")}
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{page.name}" in linked, page.name


def test_the_slug_is_githubs() -> None:
    assert slug("What `make run` starts") == "what-make-run-starts"
    assert slug("8. Local (the embedded default)") == "8-local-the-embedded-default"
    assert slug("Destroy, and what stays") == "destroy-and-what-stays"


def test_a_missing_file_and_a_missing_heading_are_reported(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Here\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#here) [gone](c.md) [bad](a.md#there) `[code](x.md)`\n")
    assert broken(page, tmp_path) == [
        "b.md: c.md (no such file)",
        "b.md: a.md#there (no such heading)",
    ]
