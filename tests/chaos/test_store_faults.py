"""Chaos: DynamoDB misbehaves without going away. A brownout slows every request past a
heartbeat for longer than a lease, and writes whose clients gave up land seconds later.

Sessions make both likely to matter: one renewal carries a whole worker, and a peer may be
tempted to judge it dead. Neither may cause a mass expiry, a second owner, an expiry or a
checkpoint that moves back, or a release that frees a stream someone else took since.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from chaos_support import (
    CRASH_ENDINGS,
    LEASE_SECONDS,
    assert_invariants,
    finish,
    recovery_timeout,
    start_fleet,
)

from local.moto_process import (
    held_writes,
    hold_dynamodb_writes,
    set_dynamodb_fault,
    set_dynamodb_slow,
)
from local.testbed import Testbed
from streamlease import aws, dynamo
from streamlease.schema import PK, WORKER_PREFIX, Liveness, StreamAttr, WorkerAttr
from streamlease.seqs import NOTHING_DELIVERED

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

BROWNOUT_DELAY_SECONDS = 1.2
"""Past a heartbeat (0.5 s) and past the workers' DynamoDB timeout (1 s): every call of theirs
times out on their side while DynamoDB applies it a moment later."""
HOLD_SECONDS = 3.0
"""How long a held write waits before it is applied: its client gave up long before."""


class ExpiryWatch:
    """Polls every item's lease expiry (sessions: worker items; per-stream: stream items) and
    ``last_seq``, and remembers any that moved back."""

    def __init__(self, bed: Testbed) -> None:
        self._client = aws.client("dynamodb", bed.settings)
        self._table = bed.settings.table_name
        self._highest: dict[str, int] = {}
        self.backwards: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                items = list(dynamo.items(self._client.scan, {"TableName": self._table}))
            except Exception:  # a read that timed out: try again
                continue
            for item in items:
                self._check(item)

    def _check(self, item: dict[str, object]) -> None:
        key = str(item[PK])
        if key.startswith(WORKER_PREFIX):
            # A session's expiry while it is live; a tombstone keeps the last one.
            watched = f"{key} expiry", int(str(item.get(WorkerAttr.EXPIRES_AT_MS, 0)))
        elif item.get(StreamAttr.LEASE_OWNER):
            epoch = int(str(item.get(StreamAttr.LEASE_EPOCH, 0)))
            watched = f"{key}@{epoch} expiry", int(str(item.get(StreamAttr.LEASE_EXPIRES_AT_MS, 0)))
        else:
            return
        epoch = int(str(item.get(StreamAttr.LEASE_EPOCH, 0)))
        seq = (
            f"{key}@{epoch} last_seq",
            int(str(item.get(StreamAttr.LAST_SEQ, NOTHING_DELIVERED))),
        )
        for name, value in (watched, seq):
            before = self._highest.get(name)
            if before is not None and value < before:
                self.backwards.append(f"{name} {before} -> {value}")
            self._highest[name] = value if before is None else max(before, value)

    @contextmanager
    def running(self) -> Iterator[ExpiryWatch]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(5)


def test_a_brownout_longer_than_a_lease_expires_nobody_and_owns_nothing_twice(
    bed: Testbed,
) -> None:
    """Every DynamoDB request slowed past a heartbeat (and past the workers' timeout) for longer
    than a lease: holders fence themselves, and no observer whose own renewals fail judges a
    peer dead — afterwards every stream is owned, with no overlap and no gap. With sessions, not
    one stream changes hands because of it."""
    ids = start_fleet(bed)
    endpoint = bed.settings.aws_endpoint_url
    set_dynamodb_slow(endpoint, BROWNOUT_DELAY_SECONDS)
    try:
        time.sleep(1.5 * LEASE_SECONDS)
    finally:
        set_dynamodb_fault(endpoint, "up")
    bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    time.sleep(LEASE_SECONDS)  # everyone renews and delivers again
    report = finish(bed)
    assert_invariants(bed, report)
    if bed.settings.liveness is Liveness.SESSION:
        crashed = [t for t in report.takeovers if t.from_end_reason in CRASH_ENDINGS]
        assert not crashed, f"a brownout cost {len(crashed)} takeover(s): {crashed[:3]}"
        assert not [e for e in bed.tail.events if e.event == "lost"], "a session was expired"


@pytest.mark.parametrize("write", ["renewal", "release"])
def test_a_write_that_lands_late_changes_nothing(bed: Testbed, write: str) -> None:
    """A renewal (the checkpoint rides on it) or a release held by DynamoDB and applied seconds
    after its client gave up: the worker retried meanwhile, and the late write neither moves
    an expiry or a checkpoint back nor frees a stream its new owner holds."""
    ids = start_fleet(bed)
    endpoint = bed.settings.aws_endpoint_url
    sessions = bed.settings.liveness is Liveness.SESSION
    if write == "renewal":
        match = ["WORKER#", "#hb + :one"] if sessions else ["CONN#", "SET #exp = :exp, #seq = :seq"]
    else:
        match = ["REMOVE #owner", ":me"]
    applied_before = held_writes(endpoint)["applied"]
    with ExpiryWatch(bed).running() as watch:
        hold_dynamodb_writes(endpoint, ["UpdateItem", *match], HOLD_SECONDS, count=2)
        if write == "release":
            victim = max(bed.live_workers(), key=lambda w: len(bed.holdings().get(w.worker_id, ())))
            held = bed.holdings()[victim.worker_id]
            bed.add_worker()
            assert victim.terminate(bed.settings.shutdown_budget_seconds + 10) == 0
            bed.wait_taken_over(held, victim.worker_id, recovery_timeout(bed.settings))
        bed.wait_for(
            lambda: held_writes(endpoint)["applied"] >= applied_before + 2,
            HOLD_SECONDS * 2 + 20,
            "the held writes landed",
        )
        time.sleep(LEASE_SECONDS)
    bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    report = finish(bed)
    assert_invariants(bed, report)
    assert not watch.backwards, watch.backwards[:5]
    if sessions:
        assert not [e for e in bed.tail.events if e.event == "lost"], "a session was lost"
