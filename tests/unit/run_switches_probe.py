"""Run only by ``test_run_switches.py``, as a pytest run of its own (not a ``test_*`` file, so
the suite does not collect it): inside a test, the run's switches are set and the settings from
the shell are not."""

from __future__ import annotations

import os


def test_probe() -> None:
    assert os.environ.get("STREAMLEASE_TEST_NEEDS_BROWSER") == "1"
    assert os.environ.get("STREAMLEASE_UPDATE_DOCS_SCREENSHOT") == "1"
    assert "STREAMLEASE_LEASE_SECONDS" not in os.environ
