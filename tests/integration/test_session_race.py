"""Session races between real OS processes against the serialised moto server (architecture §4a).

Racer processes (this file run as a script; the harness is ``test_lease_race``'s) are released
together by a go signal. Every race's clock starts at the go signal (never at a racer's start-up,
which a loaded machine stretches), and a race lasts until what it is about has happened — every
session tombstoned, a renewal landed, enough epochs won — within a generous cap:

- **tombstone vs renewal**: one process renews a few sessions, now and then stalling right
  around the observers' patience; observer processes each watch every session and tombstone it
  (condition ``hb = :seen``) once its ``hb`` stood still for that long on their own clock. A
  session may be tombstoned once; the winner's ``hb`` must be the last renewal that took effect
  (no renewal succeeds after a tombstone), and every renewal the holder was told succeeded is
  counted in the stored ``hb``.
- **revoke vs late renewals**: a gray failure: every renewal of a few sessions lands a second
  after its client gave up, while the holder keeps renewing; then the holder revokes each
  session (condition: still live). Renewals still on their way land after the revoke: none may
  take effect, so each session stays EXPIRED with the ``hb`` it had when revoked.
- **takeover vs release**: the dead session's worker releases its streams while taker
  processes take them over (``take_from``) or free them (``release_for``) at its epoch. At most
  one taker wins a stream; a stream someone took is never freed by the old holder, and ends
  held by that taker one epoch up; every other stream ends free at the old epoch. Whoever
  wrote last, a stream ends in the orphan index exactly when it is free.
- **orphan index vs stop/start**: acquirer processes find streams by scanning the orphan index
  (``by-shard-expiry``, in segments), take them for their session, hold them a moment and
  release them, while a control-plane process stops and starts the same streams. No epoch of a
  stream is ever won twice, and at the end every stream is in the orphan index exactly when it
  is STARTED and no session holds it.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_lease_race import (
    race_settings,
    run_racers,
    run_threads,
    seed_streams,
    stored_items,
    wait_for_go,
)

from lambdas.stream_repo import StreamRepo
from streamlease import aws, checkpoints, expiry_index
from streamlease.errors import LeaseConflict, LeaseLost, SessionExpired, StoreError
from streamlease.index_backfill import backfill
from streamlease.lease_store import LeaseStore, wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import SESSION_HELD_MS, DesiredState, Liveness, StreamAttr, WorkerState
from streamlease.session_store import SessionStore
from streamlease.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.alone]

RACER = Path(__file__).resolve()
SESSIONS = 6
PATIENCE_MS = 150
"""How long an observer waits for an hb that does not move before it tombstones."""
RACE_CAP_SECONDS = 60.0
"""How long a race may go on, from the go signal, waiting for what it is about to happen: a
bound for a badly loaded machine, not an expectation (each race ends as soon as it has)."""
DEAD = "w-dead"
DEAD_EPOCH = 5
A = StreamAttr


def _stores(endpoint: str, table: str) -> tuple[SessionStore, LeaseStore]:
    client = aws.client("dynamodb", race_settings(endpoint))
    client.describe_table(TableName=table)  # open a connection before the start line
    return SessionStore(client, table), LeaseStore(client, table)


# --- tombstone vs renewal ------------------------------------------------------------------------


def run_tombstone_race(endpoint: str, table: str, *, observers: int) -> list[dict[str, Any]]:
    """Race until every session was tombstoned (the holder's renewals stop at the tombstone
    they meet, the observers at the tombstone they read), or the cap."""
    sessions = SessionStore(aws.client("dynamodb", race_settings(endpoint)), table)
    now = wall_ms()
    for index in range(SESSIONS):
        sessions.create(
            WorkerInfo(f"s{index}", WorkerState.RUNNING, now, now + 60_000, 0, 10, "h", 1)
        )
    common = ["tombstone", f"--endpoint={endpoint}", f"--table={table}"]
    arguments = [[*common, "--role=holder", "--process=0"]]
    arguments += [[*common, "--role=observer", f"--process={p}"] for p in range(1, observers + 1)]
    return run_racers(arguments, RACE_CAP_SECONDS + 60, script=RACER)


def tombstone_racer(args: argparse.Namespace) -> dict[str, Any]:
    sessions, _ = _stores(args.endpoint, args.table)
    rng = random.Random()
    lock = threading.Lock()
    report: dict[str, Any] = {"renewed": collections.Counter(), "expired_seen": [], "won": []}
    end = 0.0  # set at the go signal

    def hold(index: int) -> None:
        session_id = f"s{index}"
        expires = wall_ms() + 60_000
        while time.monotonic() < end:
            # Usually well inside the observers' patience; one in four a stall around it.
            pause = rng.uniform(0.1, 0.25) if rng.random() < 0.25 else rng.uniform(0.01, 0.05)
            time.sleep(pause)
            expires += 1
            try:
                sessions.renew(
                    session_id, expires_at_ms=expires, now_ms=wall_ms(), active_streams=0
                )
            except SessionExpired:
                with lock:
                    report["expired_seen"].append(session_id)
                return
            with lock:
                report["renewed"][session_id] += 1

    def observe(index: int) -> None:
        session_id = f"s{index}"
        seen: tuple[int, float] | None = None
        while time.monotonic() < end:
            info = sessions.read(session_id)
            if info is None or not info.is_live:
                return
            now = time.monotonic()
            if seen is None or seen[0] != info.hb:
                seen = (info.hb, now)
            elif (now - seen[1]) * 1000 >= PATIENCE_MS:
                expiry = sessions.expire(session_id, by=f"p{args.process}", seen_hb=info.hb)
                if expiry.won:
                    with lock:
                        report["won"].append((session_id, info.hb))
                    return
            time.sleep(rng.uniform(0.005, 0.02))

    wait_for_go()
    end = time.monotonic() + RACE_CAP_SECONDS
    run_threads(hold if args.role == "holder" else observe, SESSIONS)
    report["renewed"] = dict(report["renewed"])
    return report


def test_a_tombstone_and_a_renewal_never_both_win(aws_settings):
    """Renewals that stall around the observers' patience against observers that tombstone at
    once, until every session was judged dead: one tombstone per session at most, naming the
    last renewal that took effect; no renewal succeeds after it; the holder learns its session
    expired."""
    endpoint, table = aws_settings.aws_endpoint_url, aws_settings.table_name
    started = time.monotonic()
    reports = run_tombstone_race(endpoint, table, observers=3)
    print(f"tombstone race: every session judged dead {time.monotonic() - started:.1f} s in")
    holder, observers = reports[0], reports[1:]
    wins: dict[str, list[int]] = collections.defaultdict(list)
    for report in observers:
        for session_id, hb in report["won"]:
            wins[session_id].append(hb)
    sessions = SessionStore(aws.client("dynamodb", race_settings(endpoint)), table)
    assert any(wins.values()), "no session was ever judged dead: the race did not happen"
    for index in range(SESSIONS):
        session_id = f"s{index}"
        stored = sessions.read(session_id)
        assert stored is not None
        assert stored.state is WorkerState.EXPIRED, f"{session_id} never judged dead: no race"
        renewed = holder["renewed"].get(session_id, 0)
        assert stored.hb == renewed, f"{session_id}: hb {stored.hb}, {renewed} renewals told ok"
        assert len(wins[session_id]) <= 1, f"{session_id} tombstoned {wins[session_id]}"
        if wins[session_id]:
            assert stored.state is WorkerState.EXPIRED
            assert wins[session_id] == [stored.hb], "a renewal succeeded after the tombstone"
            assert session_id in holder["expired_seen"]


# --- revoke vs late renewals ---------------------------------------------------------------------

LATE_SECONDS = 1.0
"""How late each renewal of the revoke race lands..."""
RENEWAL_TIMEOUT_SECONDS = 0.3
"""... long after its client gave up."""


def run_revoke_race(endpoint: str, table: str, *, holders: int, duration: float) -> list[Any]:
    """Each holder renews each of its sessions for at least ``duration`` from the go signal and
    until one of its renewals has landed (a held renewal lands ``LATE_SECONDS`` after it was
    sent, later on a loaded machine), then revokes it."""
    sessions = SessionStore(aws.client("dynamodb", race_settings(endpoint)), table)
    now = wall_ms()
    for process in range(holders):
        for index in range(SESSIONS):
            sessions.create(
                WorkerInfo(
                    f"g{process}-{index}", WorkerState.RUNNING, now, now + 60_000, 0, 1, "h", 1
                )
            )
    common = ["revoke", f"--endpoint={endpoint}", f"--table={table}", f"--duration={duration}"]
    arguments = [[*common, "--role=holder", f"--process={p}"] for p in range(holders)]
    return run_racers(arguments, RACE_CAP_SECONDS + 60, script=RACER)


def revoke_racer(args: argparse.Namespace) -> dict[str, Any]:
    sessions, _ = _stores(args.endpoint, args.table)
    fast = Settings(
        aws_endpoint_url=args.endpoint, dynamodb_timeout_seconds=RENEWAL_TIMEOUT_SECONDS
    )
    renewals = SessionStore(aws.client("dynamodb", fast, max_attempts=1), args.table)
    lock = threading.Lock()
    from local.moto_process import held_writes

    report: dict[str, Any] = {"sent": {}, "answered": 0, "revoked": {}, "waiting_at_revoke": 0}
    start = 0.0  # set at the go signal

    def landed(session_id: str) -> bool:
        stored = sessions.read(session_id)
        return stored is not None and stored.hb > 0

    def hold(index: int) -> None:
        session_id = f"g{args.process}-{index}"
        expires, sent, answered = wall_ms() + 60_000, 0, 0
        last = False
        while not last:
            # Decided before the renewal, so the last one is sent right before the revoke.
            elapsed = time.monotonic() - start
            last = elapsed >= RACE_CAP_SECONDS or (elapsed >= args.duration and landed(session_id))
            expires += 1
            sent += 1
            try:
                renewals.renew(
                    session_id, expires_at_ms=expires, now_ms=wall_ms(), active_streams=0
                )
                answered += 1
            except StoreError:
                pass  # the gray failure: the answer never comes back in time
        expiry = sessions.expire(session_id, by=session_id, seen_hb=None)
        waiting = held_writes(args.endpoint)["waiting"]
        stored = sessions.read(session_id)
        with lock:
            report["waiting_at_revoke"] = max(report["waiting_at_revoke"], waiting)
            report["sent"][session_id] = sent
            report["answered"] += answered
            report["revoked"][session_id] = [expiry.won, None if stored is None else stored.hb]

    wait_for_go()
    start = time.monotonic()
    run_threads(hold, SESSIONS)
    return report


def test_a_revoke_and_renewals_that_land_after_it_never_both_take_effect(aws_settings):
    """Renewals held by the store and applied a second after their clients gave up, sent until
    the moment each session is revoked by its own holder: every revoke wins, and the renewals
    still on their way when it did land on a tombstone and change nothing."""
    # Here, not at the top: the racers run this file as a script, without the repository root.
    from local.moto_process import held_writes, hold_dynamodb_writes, stop_holding_writes
    from local.polling import wait_until

    endpoint, table = aws_settings.aws_endpoint_url, aws_settings.table_name
    applied_before = held_writes(endpoint)["applied"]
    hold_dynamodb_writes(endpoint, ["UpdateItem", "WORKER#g", "#hb + :one"], LATE_SECONDS, 100_000)
    try:
        reports = run_revoke_race(endpoint, table, holders=2, duration=2.0)
        wait_until(lambda: held_writes(endpoint)["waiting"] == 0, 30, "the held renewals landed")
    finally:
        stop_holding_writes(endpoint)
    late = max(report["waiting_at_revoke"] for report in reports)
    assert late > 0, "no renewal was still on its way at the revoke: no race"
    assert held_writes(endpoint)["applied"] > applied_before
    sessions = SessionStore(aws.client("dynamodb", race_settings(endpoint)), table)
    for report in reports:
        assert report["answered"] == 0, "a held renewal was answered in time: no gray failure"
        for session_id, (won, hb_at_revoke) in report["revoked"].items():
            stored = sessions.read(session_id)
            assert won, f"{session_id}: the revoke lost"
            assert stored is not None and stored.state is WorkerState.EXPIRED, session_id
            assert stored.hb == hb_at_revoke, f"{session_id}: a renewal took effect after it"
            assert 0 < stored.hb < report["sent"][session_id], session_id


# --- takeover vs release ---------------------------------------------------------------------


def run_release_race(
    endpoint: str, table: str, *, streams: int, takers: int
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    ids = [f"rel-{i:03d}" for i in range(streams)]
    seed_streams(endpoint, table, ids, owner=DEAD, expires_ms=SESSION_HELD_MS, epoch=DEAD_EPOCH)
    common = ["release", f"--endpoint={endpoint}", f"--table={table}", f"--streams={streams}"]
    arguments = [[*common, "--role=holder", "--process=0"]]
    arguments += [[*common, "--role=taker", f"--process={p}"] for p in range(1, takers + 1)]
    return run_racers(arguments, 120, script=RACER), stored_items(endpoint, table)


def release_racer(args: argparse.Namespace) -> dict[str, Any]:
    _, store = _stores(args.endpoint, args.table)
    rng = random.Random()
    ids = [f"rel-{i:03d}" for i in range(args.streams)]
    rng.shuffle(ids)
    outcomes: dict[str, str] = {}
    vector = checkpoints.encode([checkpoints.Checkpoint(DEAD_EPOCH, 100, 0)])
    wait_for_go()
    for slot, stream_id in enumerate(ids):
        try:
            if args.role == "holder":
                released = store.release(stream_id, DEAD, DEAD_EPOCH, last_seq=50)
                outcomes[stream_id] = "released" if released is not None else "gone"
            elif rng.random() < 0.5:
                entry = checkpoints.entry_at(vector, 0)
                store.take_from(
                    stream_id,
                    DEAD,
                    DEAD_EPOCH,
                    entry[1] if entry else None,
                    f"p{args.process}",
                    slot,
                )
                outcomes[stream_id] = "taken"
            else:
                freed = store.release_for(stream_id, DEAD, DEAD_EPOCH, 100)
                outcomes[stream_id] = "freed" if freed is not None else "nothing"
        except (LeaseConflict, LeaseLost) as exc:
            outcomes[stream_id] = type(exc).__name__
        except StoreError:
            outcomes[stream_id] = "error"
    return {"owner": f"p{args.process}", "outcomes": outcomes}


def test_a_takeover_and_the_old_holders_release_never_both_win(aws_settings):
    """The dead session's worker releases while takers take over or free: at most one taker
    per stream; a taken stream is never freed by the old holder and sits one epoch up with its
    taker; every other stream ends free at the old epoch."""
    endpoint, table = aws_settings.aws_endpoint_url, aws_settings.table_name
    reports, stored = run_release_race(endpoint, table, streams=80, takers=3)
    holder, takers = reports[0], reports[1:]
    assert "error" not in holder["outcomes"].values()
    taken_by: dict[str, list[str]] = collections.defaultdict(list)
    for report in takers:
        for stream_id, outcome in report["outcomes"].items():
            assert outcome != "error"
            if outcome == "taken":
                taken_by[stream_id].append(report["owner"])
    assert taken_by and len(taken_by) < 80, "the race did not happen both ways"
    for stream_id, item in stored.items():
        winners = taken_by.get(stream_id, [])
        assert len(winners) <= 1, f"{stream_id} taken by {winners}"
        if winners:
            assert (item.get(A.LEASE_OWNER), int(item[A.LEASE_EPOCH])) == (
                winners[0],
                DEAD_EPOCH + 1,
            )
            assert holder["outcomes"][stream_id] == "LeaseLost"
            assert int(item[A.LAST_SEQ]) == 100
        else:
            assert item.get(A.LEASE_OWNER) is None, stream_id
            assert int(item[A.LEASE_EPOCH]) == DEAD_EPOCH
        assert (A.EXPIRY_SHARD in item) == (not winners), f"{stream_id}: orphan index entry"


# --- orphan index vs stop/start --------------------------------------------------------------

ORPHANS = 40
TOGGLES = 10
"""The toggler stops and starts streams at least this many times (more than ``TOGGLES``)."""


def run_orphan_race(
    endpoint: str, table: str, *, acquirers: int, duration: float
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    ids = [f"orph-{i:02d}" for i in range(ORPHANS)]
    seed_streams(endpoint, table, ids)
    backfill(aws.client("dynamodb", race_settings(endpoint)), table, Liveness.SESSION)
    common = ["orphans", f"--endpoint={endpoint}", f"--table={table}", f"--duration={duration}"]
    arguments = [[*common, "--role=toggler", "--process=0"]]
    arguments += [[*common, "--role=acquirer", f"--process={p}"] for p in range(1, acquirers + 1)]
    arguments = [[*a, f"--wins={ORPHANS // acquirers + 1}"] for a in arguments]
    return run_racers(arguments, RACE_CAP_SECONDS + 60, script=RACER), stored_items(endpoint, table)


def orphan_racer(args: argparse.Namespace) -> dict[str, Any]:
    _, store = _stores(args.endpoint, args.table)
    repo = StreamRepo(aws.client("dynamodb", race_settings(args.endpoint)), args.table)
    rng = random.Random()
    report: dict[str, Any] = {"won": [], "toggled": 0}
    owner = f"p{args.process}"
    wait_for_go()
    start = time.monotonic()

    def racing(done: bool) -> bool:
        """Until ``duration`` has passed and this racer did its part (``done``), or the cap."""
        elapsed = time.monotonic() - start
        return elapsed < RACE_CAP_SECONDS and (elapsed < args.duration or not done)

    if args.role == "toggler":
        while racing(report["toggled"] > TOGGLES):
            stream_id = f"orph-{rng.randrange(ORPHANS):02d}"
            repo.set_desired_state(stream_id, DesiredState.STOPPED, "ops")
            time.sleep(rng.uniform(0.0, 0.02))
            if rng.random() < 0.7:
                repo.set_desired_state(stream_id, DesiredState.STARTED, "ops")
            report["toggled"] += 1
        return report
    slot = 0
    while racing(len(report["won"]) >= args.wins):
        found = store.orphans(wall_ms(), limit=6, segment=rng.randrange(2), segments=2)
        rng.shuffle(found)
        for view in found[:3]:
            slot += 1
            try:
                lease = store.acquire(view.stream_id, owner, 60_000, slot=slot)
            except LeaseConflict:
                continue
            report["won"].append((lease.stream_id, lease.epoch))
            time.sleep(rng.uniform(0.0, 0.03))
            try:
                store.release(lease.stream_id, owner, lease.epoch, last_seq=lease.epoch)
            except LeaseLost:
                continue
    return report


def test_streams_found_through_the_orphan_index_are_never_won_twice(aws_settings):
    """Acquirers scanning the orphan index against stops and starts of the same streams: each
    epoch of a stream is won by one process, and at the end the index holds exactly the
    STARTED streams nobody holds."""
    endpoint, table = aws_settings.aws_endpoint_url, aws_settings.table_name
    reports, stored = run_orphan_race(endpoint, table, acquirers=3, duration=4.0)
    toggler, acquirers = reports[0], reports[1:]
    assert toggler["toggled"] > TOGGLES
    winners: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    for process, report in enumerate(acquirers, start=1):
        for stream_id, epoch in report["won"]:
            winners[(stream_id, epoch)].append(process)
    assert len(winners) > ORPHANS, "the acquirers did not race through the index"
    assert all(len(w) == 1 for w in winners.values()), "an epoch won twice"
    for stream_id, item in stored.items():
        assert item.get(A.LEASE_OWNER) is None, f"{stream_id} still held"
        assert (A.EXPIRY_SHARD in item) == expiry_index.belongs(item), stream_id


# --- racer entry point -----------------------------------------------------------------------


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="a racer process of the session races")
    parser.add_argument("race", choices=["tombstone", "release", "revoke", "orphans"])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--process", type=int, required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--streams", type=int, default=0)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--wins", type=int, default=0)
    args = parser.parse_args(argv)
    racers = {
        "tombstone": tombstone_racer,
        "release": release_racer,
        "revoke": revoke_racer,
        "orphans": orphan_racer,
    }
    report = racers[args.race](args)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
