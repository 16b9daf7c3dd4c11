"""MkDocs hook (mkdocs.yml): the site's home page is README.md, as GitHub shows it.

README.md sits at the repository root, outside ``docs/``; this hook adds it to the site as
``index.md``, with its links into ``docs/`` made relative to the site (``docs/operating.md`` →
``operating.md``). Pages in ``docs/`` that link to ``../README.md`` reach the home page the same
way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent / "README.md"
INTO_DOCS = re.compile(r"\]\(docs/")
TO_README = re.compile(r"\]\(\.\./README\.md")


def on_files(files: Any, config: Any) -> Any:
    """Add README.md as the home page."""
    from mkdocs.structure.files import File

    text = INTO_DOCS.sub("](", README.read_text(encoding="utf-8"))
    files.append(File.generated(config, "index.md", content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links to the README from a page in ``docs/`` go to the home page."""
    return TO_README.sub("](index.md", markdown)
