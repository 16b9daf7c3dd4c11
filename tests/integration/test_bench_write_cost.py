"""The benchmark harness runs: its smallest measurement, on a real worker, for a few seconds.

``make bench`` is not part of ``make test``; this proves the request counter still hooks into a
worker process and prices what it sends (nothing is asserted about speed).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bench import write_cost
from bench.common import Progress
from bench.context import OURS, BenchContext
from local.moto_process import MotoProcess
from streamlease.schema import BY_STATE_EXPIRY

pytestmark = pytest.mark.slow


def test_the_write_cost_measurement_counts_a_real_workers_renewals(
    moto_server: MotoProcess, tmp_path: Path
) -> None:
    """One worker, three streams, two seconds of counting: renewals were seen, and each moved
    the by-state-expiry index entry (delete + insert) on top of its table write."""
    ctx = BenchContext(
        quick=True, progress=Progress(1, stream=io.StringIO()), work_dir=tmp_path, _moto=moto_server
    )
    delta = write_cost.measure(ctx, OURS, streams=3, window_seconds=2.0)
    renewals = delta["by_target"].get("UpdateItem stream", 0)
    assert renewals >= 3, delta
    units = delta["write_units"]
    assert units.get(BY_STATE_EXPIRY.name, 0) >= units["table"] > 0, delta
