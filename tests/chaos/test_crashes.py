"""Chaos: workers that die, drain or freeze. Never two owners, nothing lost, repeats only after
a holder that could not hand over, and a graceful rolling restart repeats nothing at all."""

from __future__ import annotations

import random
import signal
import time

import pytest
from chaos_support import (
    LEASE_SECONDS,
    assert_invariants,
    finish,
    recovery_timeout,
    start_fleet,
)

from local.testbed import Testbed

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_repeated_kill_9_of_random_workers(bed: Testbed) -> None:
    """Three rounds of kill -9 on a random worker (replaced at once): every stream is taken
    over, no two holders overlap, no seq is lost, repeats are bounded."""
    ids = start_fleet(bed)
    rng = random.Random(7)
    for _ in range(3):
        holdings = bed.holdings()
        victim = rng.choice([w for w in bed.live_workers() if holdings.get(w.worker_id)])
        held = holdings[victim.worker_id]
        victim.kill()
        bed.add_worker()
        bed.wait_taken_over(held, victim.worker_id, recovery_timeout(bed.settings))
        bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    report = finish(bed)
    assert_invariants(bed, report)
    assert len(report.takeovers) >= 3


def test_rolling_restart_by_sigterm_repeats_nothing(bed: Testbed) -> None:
    """Each worker in turn: start its replacement, SIGTERM it, wait for its streams to move.
    A drained worker releases with a final checkpoint, so zero duplicates are allowed."""
    ids = start_fleet(bed)
    for old in list(bed.live_workers()):
        held = bed.holdings().get(old.worker_id, set())
        bed.add_worker()
        code = old.terminate(bed.settings.shutdown_budget_seconds + 10)
        assert code == 0, f"{old.worker_id} exited {code}\n{old.log_tail()}"
        bed.wait_taken_over(held, old.worker_id, recovery_timeout(bed.settings))
        bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    report = finish(bed)
    assert_invariants(bed, report, duplicates_allowed_after=())
    assert report.duplicates == 0
    assert len(report.takeovers) >= 1


def test_sigstop_past_the_lease_then_sigcont(bed: Testbed) -> None:
    """A frozen worker loses its streams to others; when it wakes it must not deliver a single
    message under its old epochs (no overlap, no stale write in the sink)."""
    ids = start_fleet(bed)
    holdings = bed.holdings()
    victim = max(bed.live_workers(), key=lambda w: len(holdings.get(w.worker_id, ())))
    held = holdings[victim.worker_id]
    assert held, "the victim held nothing; the scenario would prove nothing"
    victim.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    bed.wait_taken_over(held, victim.worker_id, recovery_timeout(bed.settings))
    # Stay frozen at least two leases, so every one of its deadlines has long passed.
    time.sleep(max(0.0, frozen_at + 2 * LEASE_SECONDS - time.monotonic()))
    victim.signal(signal.SIGCONT)
    bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    time.sleep(LEASE_SECONDS)  # let the woken worker notice it lost everything
    report = finish(bed)
    assert_invariants(bed, report)
    assert any(t.from_worker == victim.worker_id for t in report.takeovers)
