"""Chaos: the liveness-mode switch of docs/how-it-works.md, with a worker killed before it
(and no reaper run, as when the task-stopped event was lost).

Run from each mode to the other: stop the fleet (each worker drains), wait until ``GET
/workers`` lists nobody, start the fleet in the other mode. Every stream must be owned by a live
worker again: the killed worker's streams too, held through a session that nobody will ever
renew (sessions → per-stream) or by per-stream leases that lapse (per-stream → sessions). How
soon (about two leases) is measured and shown, not asserted: a loaded machine stretches it; the
bound is a benchmark figure (``make bench``, failover section).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from chaos_support import (
    LEASE_SECONDS,
    WORKERS,
    assert_invariants,
    finish,
    recovery_timeout,
    start_fleet,
)

from local.testbed import Testbed
from streamlease.schema import Liveness

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_a_mode_switch_after_a_worker_was_killed_owns_every_stream_again(
    bed: Testbed, measured: Callable[[str, float, str], None]
) -> None:
    """Kill -9 the worker holding most streams (no reaper), drain the others, wait until no
    worker is listed, start the other mode's fleet: every stream is owned again (within the
    recovery cap of a few leases) once its first worker runs; no overlap, no gap."""
    ids = start_fleet(bed)
    holdings = bed.holdings()
    victim = max(bed.live_workers(), key=lambda w: len(holdings.get(w.worker_id, ())))
    assert holdings[victim.worker_id], "the killed worker held nothing"
    victim.kill()
    for worker in bed.live_workers():
        assert worker.terminate(bed.settings.shutdown_budget_seconds + 10) == 0
    bed.wait_for(lambda: not bed.api.list_workers(), recovery_timeout(bed.settings), "no worker")

    old = bed.settings.liveness
    new = Liveness.STREAM if old is Liveness.SESSION else Liveness.SESSION
    fleet = [bed.add_worker(liveness=new) for _ in range(WORKERS)]
    bed.wait_for(
        lambda: any(bed.worker_running(w) for w in fleet), 60, "the new fleet's first worker"
    )
    waited = bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    switch = f"mode switch {old.value} → {new.value}"
    measured(f"{switch}: owned again after the new fleet ran", waited / LEASE_SECONDS, "leases")
    time.sleep(LEASE_SECONDS)  # the new fleet delivers for a while
    report = finish(bed)
    assert_invariants(bed, report)
