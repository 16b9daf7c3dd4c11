"""The failover section's smallest measurement, at two timer scales, on real worker processes.

``make bench`` is not part of ``make test``; this proves that what the section counts as
"never taken over" was really never taken over: the lease-event files, read once everything has
stopped, are the evidence (nothing is asserted about speed).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from bench import failover_rounds as failover
from bench.common import Progress
from bench.context import DEFAULT_SCALE, SESSIONS, BenchContext
from local.invariants import load_events
from local.moto_process import MotoProcess

pytestmark = [pytest.mark.slow, pytest.mark.serial]

STREAMS = 6
LARGER_SCALE = 0.4
"""A lease of 8 s: long enough that a reaped worker's last deadline outlives the next round."""


@pytest.mark.parametrize("scale", [DEFAULT_SCALE, LARGER_SCALE])
def test_no_stream_another_worker_acquired_is_counted_never(
    moto_server: MotoProcess, tmp_path: Path, scale: float
) -> None:
    """kill -9 + reaper, then at once a SIGTERM drain, as the section runs them (the drained
    worker may hold streams of the reaped one, or be the worker added after it): every stream
    the event files show acquired by another worker after the round began has a time, never
    NaN, none was acquired before it was let go, and each stream moved has its takeover's
    duplicates counted exactly once."""
    ctx = BenchContext(
        quick=True,
        progress=Progress(1, stream=io.StringIO()),
        work_dir=tmp_path,
        scale=scale,
        _moto=moto_server,
    )
    with ctx.testbed("failover", ctx.settings(SESSIONS), rate=failover.RATE) as bed:
        ids = failover.start_fleet(ctx, bed, STREAMS)
        rounds = failover.run_rounds(
            ctx, bed, ids, (failover.KILL_REAPER, failover.SIGTERM), rounds=1, reaper_seconds=[]
        )
    events, _ = load_events(bed.run_dir / "events")
    assert [r.mode for r in rounds] == [failover.KILL_REAPER, failover.SIGTERM]
    for measured in rounds:
        assert measured.unowned_seconds, f"{measured.mode}: the victim held nothing"
        taken = {
            e.stream_id
            for e in events
            if e.event == "acquired"
            and e.worker_id != measured.victim
            and e.mono >= measured.started_mono
        }
        never = {s for s, v in measured.unowned_seconds.items() if math.isnan(v)}
        assert not never & taken, f"{measured.mode}: counted never, but acquired: {never & taken}"
        negative = {s: v for s, v in measured.unowned_seconds.items() if v < 0}
        assert not negative, f"{measured.mode}: acquired before it was let go: {negative}"
    duplicates = failover.duplicates_by_mode(bed.report(), rounds)
    for measured in rounds:
        moved = [v for v in measured.unowned_seconds.values() if not math.isnan(v)]
        assert len(duplicates[measured.mode]) == len(moved), (measured.mode, duplicates)
