"""The shell blocks the documentation marks as tested: a ``<!-- tested -->`` line right before a
```` ```sh ```` fence. Collected in reading order (:data:`PAGES`, then top to bottom)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARK = "<!-- tested -->"
PAGES = (
    "README.md",
    "docs/local-stack.md",
    "docs/operating.md",
    "docs/connecting-feeds.md",
    "docs/reading-records.md",
)
"""The pages with tested blocks, in the order a newcomer reads them: their blocks run so."""
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    """One marked block: where it is and the shell text in it."""

    page: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(page: str, text: str) -> list[Block]:
    """The marked blocks of one page. Raises ``ValueError`` for a mark not followed by a
    ``sh`` fence, or a fence never closed."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        opening = FENCE.match(lines[number + 1]) if number + 1 < len(lines) else None
        if opening is None or opening.group(1) != "sh":
            raise ValueError(f"{page}:{number + 1}: {MARK} must stand right before a ```sh fence")
        end = next((k for k in range(number + 2, len(lines)) if lines[k].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{number + 2}: the fence is never closed")
        found.append(Block(page, number + 3, "\n".join(lines[number + 2 : end]) + "\n"))
    return found


def marked_blocks() -> list[Block]:
    """Every marked block of :data:`PAGES`, in order."""
    return [
        block
        for page in PAGES
        for block in blocks_of(page, (REPO / page).read_text(encoding="utf-8"))
    ]
