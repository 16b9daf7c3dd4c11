"""Every command a page names is one the CLI has, with the flags it has: advice such as "fix
the URL with ``streamlease set ID --url URL``" goes stale when a command or a flag is renamed."""

from __future__ import annotations

import pytest
from doc_blocks import REPO
from named_commands import command_problem, commands_of_page

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_command_a_page_names_exists_with_its_flags(page: object) -> None:
    text = REPO.joinpath(str(page)).read_text(encoding="utf-8")
    problems = [p for c in commands_of_page(text) if (p := command_problem(c)) is not None]
    assert problems == []


def test_a_command_renamed_or_a_flag_gone_is_found() -> None:
    assert command_problem("streamlease set ID --url URL") is None
    assert command_problem("streamlease secret put NAME") is None
    assert command_problem("streamlease secret NAME") is not None
    assert command_problem("streamlease set ID --seq URL") is not None
    assert command_problem("streamlease delete ID") is not None
