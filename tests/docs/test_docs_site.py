"""The documentation site builds (``make docs``): MkDocs in strict mode, so a broken link, a
missing page or anchor, or a missing included result fails; offline (every proxy points at a
closed port, so a fetch at build time would fail the build)."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import REPO, blocks_of, marked_blocks

pytestmark = pytest.mark.slow

CLOSED = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.update(
        {name: CLOSED for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("mkdocs")),
            "build",
            "--strict",
            "--site-dir",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def page(site: Path, name: str) -> str:
    return html.unescape((site / name / "index.html").read_text(encoding="utf-8"))


def test_the_home_page_is_the_readme_with_its_links_into_the_site(site: Path) -> None:
    home = html.unescape((site / "index.html").read_text(encoding="utf-8"))
    assert "What a reader gets" in home
    assert 'href="operating/"' in home and "docs/operating.md" not in home


def test_every_page_of_docs_is_built(site: Path) -> None:
    for source in (REPO / "docs").glob("*.md"):
        assert (site / source.stem / "index.html").is_file(), source.name


def test_stored_results_are_included_not_copied(site: Path) -> None:
    """The cost page shows the stored bill's title line: it came from bench/results/cost.md."""
    cost = (REPO / "bench" / "results" / "cost.md").read_text(encoding="utf-8").splitlines()
    bill = next(line for line in cost if line.startswith("### Bill: "))
    assert bill.removeprefix("### ") in page(site, "deploying")
    assert "--8<--" not in page(site, "deploying") + page(site, "proof")


def test_the_marked_blocks_are_sh_blocks_in_the_pages_read_in_order() -> None:
    blocks = marked_blocks()
    pages = [b.page for b in blocks]
    assert pages[0] == "README.md" and "docs/connecting-feeds.md" in pages
    assert all("streamlease" in b.text or "python -m" in b.text for b in blocks)


def test_a_mark_must_stand_right_before_an_sh_fence() -> None:
    good = "text\n<!-- tested -->\n```sh\nstreamlease ls\n```\n"
    assert [(b.line, b.text) for b in blocks_of("p.md", good)] == [(4, "streamlease ls\n")]
    with pytest.raises(ValueError, match="right before"):
        blocks_of("p.md", "<!-- tested -->\n\n```sh\nls\n```\n")
    with pytest.raises(ValueError, match="never closed"):
        blocks_of("p.md", "<!-- tested -->\n```sh\nls\n")
