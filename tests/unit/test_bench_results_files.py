"""Where ``python -m bench`` writes its tables: a full run to ``bench/results/latest.md``, a
quick one to ``quick.md``, and a run of some sections (``--only``) outside the stored results, so
that a part never replaces the whole run the docs quote from."""

from __future__ import annotations

from bench.__main__ import default_out
from bench.common import RESULTS_DIR


def test_a_full_run_writes_latest_and_a_quick_one_quick() -> None:
    assert default_out(quick=False, only=False) == RESULTS_DIR / "latest.md"
    assert default_out(quick=True, only=False) == RESULTS_DIR / "quick.md"


def test_a_run_of_some_sections_writes_outside_the_stored_results() -> None:
    for quick in (False, True):
        out = default_out(quick=quick, only=True)
        assert RESULTS_DIR not in out.parents
        assert out.parent.name == "build"
