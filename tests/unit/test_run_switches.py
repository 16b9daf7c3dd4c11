"""The test run's own switches reach the tests, while streamlease's settings from the shell do
not: ``STREAMLEASE_TEST_NEEDS_BROWSER=1`` must fail a run without a browser, and
``STREAMLEASE_UPDATE_DOCS_SCREENSHOT=1`` must write the documentation's picture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_runs_switches_are_kept_and_settings_cleared() -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k != "STREAMLEASE_TEST_TALLY"},  # the outer run's
        "STREAMLEASE_TEST_NEEDS_BROWSER": "1",
        "STREAMLEASE_UPDATE_DOCS_SCREENSHOT": "1",
        "STREAMLEASE_LEASE_SECONDS": "3",
    }
    probe = str(Path(__file__).with_name("run_switches_probe.py"))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-q", probe],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    assert "1 passed" in run.stdout
