"""Without a browser the dashboard test skips only where the browser is optional: CI
(``STREAMLEASE_TEST_NEEDS_BROWSER=1``, set by ``.ci/run``) fails instead."""

from __future__ import annotations

import pytest
from headless_chromium import NEEDS_BROWSER, require_chromium


@pytest.fixture
def no_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")


@pytest.mark.usefixtures("no_browser")
@pytest.mark.parametrize("value", [None, "", "0"])
def test_a_missing_browser_skips_where_it_is_optional(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(NEEDS_BROWSER, raising=False)
    else:
        monkeypatch.setenv(NEEDS_BROWSER, value)
    with pytest.raises(pytest.skip.Exception, match="optional"):
        require_chromium()


@pytest.mark.usefixtures("no_browser")
def test_a_missing_browser_fails_where_it_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NEEDS_BROWSER, "1")
    with pytest.raises(pytest.fail.Exception, match="must run"):
        require_chromium()
