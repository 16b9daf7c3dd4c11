"""Checkpoint slots lost to acquires whose answers never came back, with real workers: the
worker says so, advertises only the capacity left, and once too little is left rolls its
session over to a fresh one that takes streams again (architecture §4a)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from worker_helpers import Fleet, Streams, new_ids

from local.invariants import format_report
from local.moto_process import hold_dynamodb_writes
from local.upstream_sim import UpstreamSimulator
from local.worker_process import WorkerProcess
from streamlease.commands import Command, CommandType
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from streamlease.telemetry import WorkerMetric

pytestmark = [pytest.mark.slow, pytest.mark.serial]

CAPACITY = 3
"""Six slots: three may be lost before any stream's room is; at five the session is replaced."""
SLOW_LEASE = {"lease_seconds": 4.0, "heartbeat_seconds": 1.0}
"""The worker losing slots: lost slots stay out of use for two leases (8 s), longer than the
test takes to lose five, so none is recovered meanwhile."""
HELD_SECONDS = 3.0
"""How late a held acquire is applied: after its client and its re-read gave up."""


def log_lines(fleet: Fleet, worker: WorkerProcess, message: str) -> list[dict[str, Any]]:
    return [r for r in fleet.log_records(worker) if r.get("message") == message]


def counted(fleet: Fleet, worker: WorkerProcess, metric: str) -> int:
    return int(sum(sum(r.get(metric, [])) for r in fleet.log_records(worker) if "_aws" in r))


def test_a_worker_losing_slots_says_so_advertises_less_and_rolls_its_session_over(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, settings: Settings
) -> None:
    """Worker A holds six streams at its capacity, so it never sheds them and never polls the
    command queue (a worker at capacity receives no commands; with room, A could receive the
    start commands meant for B before its share shrank). Worker B gets start commands for them
    while the moto server holds back every acquire B sends (applied seconds later, when
    B's client and its consistent re-read have given up): each attempt ends as a conflict
    whose own write may still land, and costs B a slot. With four of six lost B's worker item
    (what ``GET /workers`` shows) says capacity 2; at five B hands off what it holds, revokes
    its session and opens a fresh one, which takes a new stream as soon as acquires are
    answered again. B logs and counts each lost slot and the rollover; no invariant breaks."""
    holder = fleet.start("a", capacity=6, min_tenure_seconds=600.0)
    owned = new_ids(6)
    for stream_id in owned:
        streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_owned(owned)
    taker = fleet.start("b", capacity=CAPACITY, **SLOW_LEASE)
    sessions = SessionStore(streams.dynamodb, settings.table_name)

    def advertised(worker_id: str) -> int | None:
        """The capacity on the worker's item: what ``GET /workers`` shows."""
        mine = [w for w in sessions.list_fleet() if w.worker_id == worker_id and w.is_live]
        return mine[0].capacity if mine else None

    fleet.wait(lambda: advertised(taker.worker_id) == CAPACITY, 20, "B registered")
    hold_dynamodb_writes(
        settings.aws_endpoint_url,
        ["attribute_not_exists(#owner)", taker.worker_id],
        HELD_SECONDS,
        count=10_000,
    )

    def lose(stream_ids: list[str]) -> None:
        before = len(log_lines(fleet, taker, "checkpoint slot lost"))
        for stream_id in stream_ids:
            streams.send(Command(CommandType.START, stream_id, 1).to_json())
        fleet.wait(
            lambda: (
                len(log_lines(fleet, taker, "checkpoint slot lost")) >= before + len(stream_ids)
            ),
            20,
            f"{len(stream_ids)} more slots lost",
        )

    lose(owned[:2])
    assert advertised(taker.worker_id) == CAPACITY  # the spare half absorbs them
    lose(owned[2:4])
    fleet.wait(lambda: advertised(taker.worker_id) == CAPACITY - 1, 10, "capacity 2 advertised")
    lose(owned[4:5])
    fleet.wait(
        lambda: log_lines(fleet, taker, "checkpoint slots lost: rolling the session over"),
        10,
        "B rolls its session over",
    )
    fleet.wait(
        lambda: (
            {w.worker_id for w in sessions.list_fleet() if w.is_live and w.capacity == CAPACITY}
            - {holder.worker_id, taker.worker_id}
        ),
        20,
        "B's fresh session live at full capacity",
    )
    hold_dynamodb_writes(settings.aws_endpoint_url, [uuid.uuid4().hex], 0.1)  # answered again
    (fresh,) = new_ids(1)
    streams.put(fresh, upstream.url_for(fresh))
    fleet.wait_seq(fresh, 10)
    fleet.stop_all()

    holders = {r["worker_id"] for r in fleet.records(fresh)}
    assert len(holders) == 1 and holders.pop().startswith(taker.worker_id + ".")
    assert len(log_lines(fleet, taker, "checkpoint slot lost")) >= 5
    assert counted(fleet, taker, WorkerMetric.CHECKPOINT_SLOTS_LOST) >= 5
    assert counted(fleet, taker, WorkerMetric.SESSION_ROLLOVERS) == 1
    report = fleet.report()
    assert report.ok, format_report(report)
