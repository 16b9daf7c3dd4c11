"""Lease races between real OS processes against the serialised moto server.

Two races, each run by several racer processes (this file run as a script) with several threads
each, released together by a go signal once all of them are connected:

- **acquire race**: every lease of a set of expired leases is contested by one thread in each
  process at the same moment. Exactly one contender may win each lease, and the stored owner
  and epoch must be the winner's.
- **boundary race**: a few streams, every process has a thread per stream. The holder renews
  right around its expiry (sometimes late, now and then stalling for half a lease) while the
  others try to take over at the first instant the lease is expired. Every success is logged
  with the expiry its holder believes in; no two owners may ever hold the same epoch, and no
  lease may start before the previous epoch's last believed expiry (plus the skew allowance)
  has passed.

``bench/stock_moto_race.py`` runs the same races against the stock moto server.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from streamlease import aws
from streamlease.errors import LeaseConflict, LeaseLost, StoreError
from streamlease.lease_store import LeaseStore, wall_ms
from streamlease.schema import PK, DesiredState, StreamAttr, stream_key
from streamlease.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

RACER = Path(__file__).resolve()
DEAD_OWNER = "w-dead"
DEAD_EPOCH = 7
A = StreamAttr


# --- shared by both races --------------------------------------------------------------------


def race_settings(endpoint_url: str) -> Settings:
    """Settings for a racer: generous timeouts, since a serialised server queues requests."""
    return Settings(aws_endpoint_url=endpoint_url, dynamodb_timeout_seconds=30.0)


def seed_streams(endpoint_url: str, table: str, stream_ids: list[str], **lease: Any) -> None:
    """Write STARTED stream items, optionally leased (``owner``, ``expires_ms``, ``epoch``)."""
    client = aws.client("dynamodb", race_settings(endpoint_url))
    ser = TypeSerializer()
    for start in range(0, len(stream_ids), 25):
        requests = []
        for stream_id in stream_ids[start : start + 25]:
            item: dict[str, Any] = {
                PK: stream_key(stream_id),
                A.STREAM_ID: stream_id,
                A.DESIRED_STATE: DesiredState.STARTED.value,
                A.WS_URL: f"wss://upstream.example/{stream_id}",
                A.LEASE_EXPIRES_AT_MS: lease.get("expires_ms", 0),
                A.LEASE_EPOCH: lease.get("epoch", 0),
                A.LAST_SEQ: 0,
                A.GENERATION: 1,
                A.TAKEOVERS: 0,
            }
            if "owner" in lease:
                item[A.LEASE_OWNER] = lease["owner"]
            requests.append(
                {"PutRequest": {"Item": {k: ser.serialize(v) for k, v in item.items()}}}
            )
        client.batch_write_item(RequestItems={table: requests})


def stored_items(endpoint_url: str, table: str) -> dict[str, dict[str, Any]]:
    """Every item of ``table`` by stream id, read consistently."""
    client = aws.client("dynamodb", race_settings(endpoint_url))
    de = TypeDeserializer()
    items: dict[str, dict[str, Any]] = {}
    request: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**request)
        for raw in page["Items"]:
            item = {k: de.deserialize(v) for k, v in raw.items()}
            items[str(item[A.STREAM_ID])] = item
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def run_racers(
    arguments: list[list[str]], timeout_seconds: float, *, script: Path = RACER
) -> list[dict[str, Any]]:
    """Start one racer process per argument list, release them together, collect their reports.

    Each racer (``script`` run with the arguments) prints ``ready`` once connected, waits for
    ``go`` on stdin, races, and prints one JSON report.
    """
    root = str(Path(__file__).resolve().parents[2])  # racers may import lambdas, as tests do
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        for args in arguments
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.strip() == "ready", f"racer {process.pid} said {line!r}"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        reports = []
        for process in processes:
            out, _ = process.communicate(timeout=timeout_seconds)
            assert process.returncode == 0, f"racer {process.pid} exited {process.returncode}"
            reports.append(json.loads(out))
        return reports
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _connected_store(endpoint_url: str, table: str, skew_ms: int) -> LeaseStore:
    client = aws.client("dynamodb", race_settings(endpoint_url))
    client.describe_table(TableName=table)  # open a connection before the start line
    return LeaseStore(client, table, clock_skew_ms=skew_ms)


def wait_for_go() -> None:
    """A racer's start line: say ``ready``, then wait for ``go``."""
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("racer: no go signal")


def run_threads(target: Any, count: int) -> None:
    """Run ``target(index)`` in ``count`` threads and wait for all of them."""
    threads = [threading.Thread(target=target, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# --- the acquire race ------------------------------------------------------------------------


@dataclass
class AcquireRaceResult:
    """What an acquire race found. A correct store has no double or wrong owners."""

    leases: int
    contenders_per_lease: int
    winners: dict[str, list[tuple[str, int]]]
    stored: dict[str, dict[str, Any]]
    store_errors: int
    elapsed_seconds: float

    @property
    def double_winners(self) -> list[str]:
        """Leases that more than one contender was told it had won."""
        return sorted(s for s, wins in self.winners.items() if len(wins) > 1)

    @property
    def unwon(self) -> list[str]:
        """Leases nobody won (only expected with store errors)."""
        return sorted(s for s, wins in self.winners.items() if not wins)

    @property
    def wrong_stored(self) -> list[str]:
        """Leases whose stored owner or epoch is not what their (single) winner was told."""
        wrong = []
        for stream_id, wins in self.winners.items():
            item = self.stored[stream_id]
            stored = (item.get(A.LEASE_OWNER), int(item.get(A.LEASE_EPOCH, -1)))
            if len(wins) == 1 and stored != wins[0]:
                wrong.append(stream_id)
        return sorted(wrong)


def run_acquire_race(
    endpoint_url: str,
    table: str,
    *,
    leases: int,
    processes: int,
    threads: int,
    contenders_per_process: int = 1,
) -> AcquireRaceResult:
    """Seed ``leases`` expired leases in ``table`` and race ``processes`` × ``threads`` for them.

    Each lease is contested by ``contenders_per_process`` threads of every process.
    """
    stream_ids = [f"race-{i:04d}" for i in range(leases)]
    seed_streams(
        endpoint_url,
        table,
        stream_ids,
        owner=DEAD_OWNER,
        expires_ms=wall_ms() - 60_000,
        epoch=DEAD_EPOCH,
    )
    common = [
        "acquire",
        f"--endpoint={endpoint_url}",
        f"--table={table}",
        f"--leases={leases}",
        f"--processes={processes}",
        f"--threads={threads}",
        f"--contenders={contenders_per_process}",
    ]
    started = time.monotonic()
    reports = run_racers([[*common, f"--process={p}"] for p in range(processes)], 120.0)
    elapsed = time.monotonic() - started
    winners: dict[str, list[tuple[str, int]]] = {s: [] for s in stream_ids}
    for report in reports:
        for stream_id, owner, epoch in report["wins"]:
            winners[stream_id].append((owner, epoch))
    return AcquireRaceResult(
        leases=leases,
        contenders_per_lease=processes * contenders_per_process,
        winners=winners,
        stored=stored_items(endpoint_url, table),
        store_errors=sum(r["store_errors"] for r in reports),
        elapsed_seconds=elapsed,
    )


def acquire_racer(args: argparse.Namespace) -> dict[str, Any]:
    """One racer process of the acquire race; returns its report."""
    store = _connected_store(args.endpoint, args.table, 1000)
    wins: list[tuple[str, str, int]] = []
    errors = collections.Counter[str]()
    lock = threading.Lock()

    def race(thread: int) -> None:
        owner = f"p{args.process}-t{thread}"
        for i in range(args.leases):
            # Every process puts ``contenders`` of its threads on each lease, and all threads
            # walk the leases in the same order: contenders reach a lease at the same moment.
            if (thread - i - args.process) % args.threads >= args.contenders:
                continue
            stream_id = f"race-{i:04d}"
            try:
                lease = store.acquire(stream_id, owner, 600_000)
            except LeaseConflict:
                continue
            except StoreError:
                with lock:
                    errors["store"] += 1
                continue
            with lock:
                wins.append((stream_id, lease.owner, lease.epoch))

    wait_for_go()
    run_threads(race, args.threads)
    return {"wins": wins, "store_errors": errors["store"]}


def test_each_expired_lease_has_exactly_one_winner_across_processes(aws_settings):
    """4 processes × 4 threads race for 200 expired leases: one winner each, and it is stored."""
    result = run_acquire_race(
        aws_settings.aws_endpoint_url, aws_settings.table_name, leases=200, processes=4, threads=4
    )

    assert result.store_errors == 0
    assert result.double_winners == []
    assert result.unwon == []
    assert result.wrong_stored == []
    for stream_id, [(owner, epoch)] in result.winners.items():
        item = result.stored[stream_id]
        assert epoch == DEAD_EPOCH + 1
        assert int(item[A.TAKEOVERS]) == 1, stream_id
        assert owner != DEAD_OWNER


# --- the boundary race -----------------------------------------------------------------------


@dataclass
class BoundaryRaceResult:
    """Every success of a boundary race, and the invariant violations found in them."""

    events: list[dict[str, Any]]
    skew_ms: int
    store_errors: int
    shared_epochs: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        owners: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
        believed_until: dict[tuple[str, int], int] = collections.defaultdict(int)
        acquired_at: dict[tuple[str, int], int] = {}
        for event in self.events:
            key = (event["stream"], event["epoch"])
            owners[key].add(event["owner"])
            believed_until[key] = max(believed_until[key], event["expires"])
            if event["kind"] == "acquire":
                acquired_at[key] = event["now"]
        self.shared_epochs = sorted(
            f"{s}@{e}: {sorted(o)}" for (s, e), o in owners.items() if len(o) > 1
        )
        for (stream, epoch), start in acquired_at.items():
            previous = believed_until.get((stream, epoch - 1))
            # The new holder's cutoff (now - skew) must be past everything the old one believed.
            if previous is not None and not previous < start - self.skew_ms:
                self.overlaps.append(
                    f"{stream}@{epoch}: started {start}, previous until {previous}"
                )

    @property
    def takeovers(self) -> int:
        """How many acquires took a lease from a holder still renewing (ownership changes)."""
        return sum(1 for e in self.events if e["kind"] == "acquire" and e["epoch"] > 1)

    @property
    def late_renewals(self) -> int:
        """Renewals that succeeded after the lease they extended had already lapsed."""
        return sum(1 for e in self.events if e["kind"] == "renew" and e["late"])


def run_boundary_race(
    endpoint_url: str,
    table: str,
    *,
    streams: int,
    processes: int,
    lease_ms: int,
    duration_seconds: float,
    skew_ms: int = 0,
) -> BoundaryRaceResult:
    """Race renewals against takeovers at the expiry of ``streams`` short leases."""
    stream_ids = [f"edge-{i:02d}" for i in range(streams)]
    seed_streams(endpoint_url, table, stream_ids)
    common = [
        "boundary",
        f"--endpoint={endpoint_url}",
        f"--table={table}",
        f"--streams={streams}",
        f"--lease-ms={lease_ms}",
        f"--skew-ms={skew_ms}",
        f"--duration={duration_seconds}",
    ]
    reports = run_racers(
        [[*common, f"--process={p}"] for p in range(processes)], duration_seconds + 60
    )
    return BoundaryRaceResult(
        events=[e for r in reports for e in r["events"]],
        skew_ms=skew_ms,
        store_errors=sum(r["store_errors"] for r in reports),
    )


def boundary_racer(args: argparse.Namespace) -> dict[str, Any]:
    """One racer process of the boundary race: a thread per stream, holding or hunting it."""
    store = _connected_store(args.endpoint, args.table, args.skew_ms)
    events: list[dict[str, Any]] = []
    lock = threading.Lock()
    rng = random.Random()

    def sleep_until(target_ms: int) -> None:
        delay = (target_ms - wall_ms()) / 1000
        if delay > 0:
            time.sleep(delay)

    store_errors = 0

    def record(
        kind: str,
        stream_id: str,
        owner: str,
        epoch: int,
        now: int,
        expires: int,
        *,
        late: bool = False,
    ) -> None:
        with lock:
            events.append(
                {
                    "kind": kind,
                    "stream": stream_id,
                    "owner": owner,
                    "epoch": epoch,
                    "now": now,
                    "expires": expires,
                    "late": late,
                }
            )

    def hold_or_hunt(index: int) -> None:
        nonlocal store_errors
        stream_id = f"edge-{index:02d}"
        owner = f"p{args.process}-s{index}"
        epoch = held_until = 0
        end = time.monotonic() + args.duration
        while time.monotonic() < end:
            try:
                if epoch:
                    # Renew within ±lease/8 of the expiry, so renewals and takeovers collide;
                    # one in five times stall for half a lease, so the lease changes hands.
                    if rng.random() < 0.2:
                        offset = args.lease_ms // 2
                    else:
                        offset = rng.randint(-args.lease_ms // 8, args.lease_ms // 8)
                    sleep_until(held_until + offset)
                    now = wall_ms()
                    try:
                        expires = store.renew(stream_id, owner, epoch, 0, args.lease_ms, now_ms=now)
                    except LeaseLost:
                        epoch = 0
                        continue
                    record("renew", stream_id, owner, epoch, now, expires, late=now > held_until)
                    held_until = expires
                    continue
                current = store.read(stream_id)
                assert current is not None
                # Strike at the first instant the lease is takeable, give or take a few ms.
                sleep_until(current.expires_at_ms + args.skew_ms + rng.randint(-5, 15))
                now = wall_ms()
                try:
                    lease = store.acquire(stream_id, owner, args.lease_ms, now_ms=now)
                except LeaseConflict:
                    continue
                epoch, held_until = lease.epoch, lease.expires_at_ms
                record("acquire", stream_id, owner, epoch, now, held_until)
            except StoreError:
                with lock:
                    store_errors += 1

    wait_for_go()
    run_threads(hold_or_hunt, args.streams)
    return {"events": events, "store_errors": store_errors}


def test_renewal_and_takeover_at_the_boundary_never_share_a_lease(aws_settings):
    """Holders renewing at expiry vs. takers striking at expiry: no shared or overlapping lease."""
    result = run_boundary_race(
        aws_settings.aws_endpoint_url,
        aws_settings.table_name,
        streams=5,
        processes=4,
        lease_ms=400,
        duration_seconds=5.0,
    )

    assert result.store_errors == 0
    assert result.shared_epochs == []
    assert result.overlaps == []
    # The race was real: leases changed hands, and some renewals landed after their expiry.
    assert result.takeovers >= 5, result.takeovers
    assert result.late_renewals >= 1, result.late_renewals


# --- racer entry point -----------------------------------------------------------------------


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="a racer process of the lease races")
    parser.add_argument("race", choices=["acquire", "boundary"])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--process", type=int, required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--contenders", type=int, default=1)
    parser.add_argument("--leases", type=int, default=0)
    parser.add_argument("--streams", type=int, default=0)
    parser.add_argument("--lease-ms", type=int, default=400)
    parser.add_argument("--skew-ms", type=int, default=0)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args(argv)
    report = acquire_racer(args) if args.race == "acquire" else boundary_racer(args)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
