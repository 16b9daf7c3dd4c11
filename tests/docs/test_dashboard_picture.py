"""The documentation's picture of the local dashboard is of the page as it is: a change to the
page or to its graphs without a new picture fails here (see dashboard_picture)."""

from __future__ import annotations

import pytest
from dashboard_picture import (
    DOCS_PICTURE,
    KEYWORD,
    UPDATE_COMMAND,
    fingerprint,
    text_of,
    with_text,
)


def test_the_documentation_picture_is_of_the_current_page() -> None:
    taken_of = text_of(DOCS_PICTURE.read_bytes(), KEYWORD)
    assert taken_of == fingerprint(), f"the page changed since its picture: run {UPDATE_COMMAND}"


def test_the_picture_keeps_the_fingerprint_it_is_given() -> None:
    """Written twice, a PNG holds one text chunk of the keyword, the last one written."""
    png = DOCS_PICTURE.read_bytes()
    once = with_text(png, KEYWORD, "first")
    twice = with_text(once, KEYWORD, "second")
    assert (text_of(once, KEYWORD), text_of(twice, KEYWORD)) == ("first", "second")
    assert len(twice) == len(once) + 1


def test_anything_but_a_png_is_refused() -> None:
    with pytest.raises(ValueError, match="not a PNG"):
        text_of(b"GIF89a", KEYWORD)
