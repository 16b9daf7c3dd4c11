"""The documentation's picture of the local dashboard, and which page it is a picture of.

The browser test (``tests/integration/test_local_dashboard.py``) takes the picture; with
``STREAMLEASE_UPDATE_DOCS_SCREENSHOT=1`` it writes it to :data:`DOCS_PICTURE` with the page's
:func:`fingerprint` in a PNG text chunk. ``tests/docs/test_dashboard_picture.py`` fails when the
page has changed since (its HTML, or a graph, series, axis or event mark of the widget list it
draws), so the picture cannot go stale while a test run leaves tracked files as they were.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Final

from local.dashboard import PAGE, local_graphs

REPO: Final = Path(__file__).resolve().parents[2]
DOCS_PICTURE: Final = REPO / "docs" / "local-dashboard.png"
KEYWORD: Final = "streamlease-page"
"""The PNG text chunk's keyword that holds the page's fingerprint."""
UPDATE_COMMAND: Final = (
    "STREAMLEASE_UPDATE_DOCS_SCREENSHOT=1 .venv/bin/python -m pytest -n 0 "
    "tests/integration/test_local_dashboard.py"
)
_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


def fingerprint() -> str:
    """A digest of what the page draws: its HTML and every local graph's title, series labels
    by axis, and kind (rates, events)."""
    graphs, elsewhere = local_graphs()
    drawn = [
        {
            "title": g.title,
            "left": [s.label or s.metric for s in g.left],
            "right": [s.label or s.metric for s in g.right],
            "rates": g.per_second,
            "events": g.events,
        }
        for g in graphs
    ]
    digest = hashlib.sha256(PAGE.read_bytes())
    digest.update(json.dumps([drawn, elsewhere]).encode())
    return digest.hexdigest()


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    if not png.startswith(_SIGNATURE):
        raise ValueError("not a PNG file")
    chunks, at = [], len(_SIGNATURE)
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind = png[at + 4 : at + 8]
        chunks.append((kind, png[at + 8 : at + 8 + length]))
        at += 12 + length
    return chunks


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def with_text(png: bytes, keyword: str, text: str) -> bytes:
    """``png`` with a text chunk ``keyword`` = ``text`` right after its header (replacing one of
    the same keyword)."""
    chunks = [
        (kind, data)
        for kind, data in _chunks(png)
        if not (kind == b"tEXt" and data.split(b"\0", 1)[0] == keyword.encode("latin-1"))
    ]
    entry = (b"tEXt", keyword.encode("latin-1") + b"\0" + text.encode("latin-1"))
    chunks.insert(1, entry)
    return _SIGNATURE + b"".join(_chunk(kind, data) for kind, data in chunks)


def text_of(png: bytes, keyword: str) -> str | None:
    """The text of ``png``'s text chunk ``keyword``, or None."""
    for kind, data in _chunks(png):
        if kind == b"tEXt":
            name, _, text = data.partition(b"\0")
            if name == keyword.encode("latin-1"):
                return text.decode("latin-1")
    return None
