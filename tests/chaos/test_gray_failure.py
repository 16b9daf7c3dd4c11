"""Chaos: a gray failure. One worker's renewals reach DynamoDB, but every answer comes back after
its client gave up (a latency spike, a half-broken network path), while its peers are fine.

Its peers see its renewals land and would never judge it dead; the worker itself never sees a
renewal succeed. That must end in a handover, not a pause: each of its streams is delivered by
a peer (about two leases after the gray failure started: measured and shown, not asserted; the
bound is a benchmark figure), with no overlap and no gap. With
per-stream leases its worker item still renews: it advertises no room while its lease renewals
go unanswered, so its peers share its streams among themselves instead of shedding them back.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Final

import pytest
from chaos_support import (
    LEASE_SECONDS,
    assert_invariants,
    finish,
    recovery_timeout,
    start_fleet,
)

from local.invariants import load_records
from local.moto_process import hold_dynamodb_writes, stop_holding_writes
from local.testbed import Testbed
from local.worker_process import WorkerProcess
from streamlease import aws
from streamlease.lease_store import wall_ms
from streamlease.schema import Liveness, belongs_to_task, worker_key
from streamlease.session_store import SessionStore

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

GRAY_DELAY_SECONDS: Final = 1.5
"""How late each held renewal lands: past the workers' DynamoDB timeout (1 s), as in the
reproduction (renewals applied 1.5 s late against a 1 s timeout)."""
GRAY_REQUESTS: Final = 100_000
"""Hold every matching request for the whole scenario."""


def renewal_match(bed: Testbed, worker: WorkerProcess) -> list[str]:
    """What only ``worker``'s renewals carry (any of its sessions: their ids continue its id).

    Sessions: the renewal of its worker item. Per-stream leases: each lease's renewal (the
    owner it names); its worker item still renews, so the worker stays on the fleet list.
    """
    if bed.settings.liveness is Liveness.SESSION:
        return ["UpdateItem", worker_key(worker.worker_id), "#hb + :one"]
    return ["UpdateItem", "SET #exp = :exp, #seq = :seq", worker.worker_id]


def test_a_gray_worker_hands_its_streams_to_its_peers(
    bed: Testbed, measured: Callable[[str, float, str], None]
) -> None:
    """The worker that holds most streams gets no answer to any renewal while every renewal
    lands 1.5 s late: each of its streams is owned by a peer (within the recovery cap), and
    records of a peer reach the sink for each; no overlap, no gap. Per-stream leases: its
    worker item, which goes on renewing, advertises no room meanwhile."""
    ids = start_fleet(bed)
    holdings = bed.holdings()
    gray = max(bed.live_workers(), key=lambda w: len(holdings.get(w.worker_id, ())))
    held = holdings[gray.worker_id]
    assert held, "the gray worker held nothing; the scenario would prove nothing"
    endpoint = bed.settings.aws_endpoint_url

    def by_peer(owner: str | None) -> bool:
        return owner is not None and not belongs_to_task(owner, gray.worker_id)

    hold_dynamodb_writes(
        endpoint, renewal_match(bed, gray), GRAY_DELAY_SECONDS, count=GRAY_REQUESTS
    )
    started, started_wall_ms = time.monotonic(), wall_ms()
    moved_at: dict[str, float] = {}
    per_stream = bed.settings.liveness is Liveness.STREAM
    sessions = SessionStore(aws.client("dynamodb", bed.settings), bed.settings.table_name)
    no_room_seen = False

    def advertises_no_room() -> bool:
        """Whether the gray worker's item (its first session: its own id) said it takes none."""
        nonlocal no_room_seen
        if not no_room_seen:
            item = sessions.read(gray.worker_id)
            no_room_seen = item is not None and item.capacity == 0
        return no_room_seen

    def all_moved() -> bool:
        if per_stream:
            advertises_no_room()
        owners = bed.owners()
        now = time.monotonic()
        for stream_id in held - moved_at.keys():
            if by_peer(owners.get(stream_id)):
                moved_at[stream_id] = now - started
        return moved_at.keys() == held

    try:
        bed.wait_for(all_moved, recovery_timeout(bed.settings), "the gray worker's streams moved")
        if per_stream:
            bed.wait_for(
                advertises_no_room,
                recovery_timeout(bed.settings),
                "the gray worker advertised no room",
            )
    finally:
        stop_holding_writes(endpoint)
    leases = sorted(t / LEASE_SECONDS for t in moved_at.values())
    measured("gray failure → owned by a peer, median", statistics.median(leases), "leases")
    measured(f"gray failure → owned by a peer, max of {len(leases)}", leases[-1], "leases")
    bed.wait_all_owned(ids, recovery_timeout(bed.settings))
    time.sleep(LEASE_SECONDS)  # the peers deliver for a while
    report = finish(bed)
    assert_invariants(bed, report)
    for stream_id in held:
        records, _ = load_records(bed.sink_file(stream_id))
        assert any(by_peer(r.worker_id) and r.received_at_ms > started_wall_ms for r in records), (
            f"{stream_id}: nothing delivered by a peer after the gray failure began"
        )
