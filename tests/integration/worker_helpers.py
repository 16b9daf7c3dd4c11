"""What the worker integration tests share: scaled settings, stream seeding, a small fleet of
``python -m worker`` processes, and evidence readers (lease events, sink records).

Timers are scaled to a lease of 1 s (heartbeat 0.25 s, reconcile 0.5 s, fence margin 0.3 s,
SQS poll 1 s, clock-skew allowance 0.1 s). Every wait polls a condition with a bound; nothing
sleeps for a fixed time to "let things happen" except where a test must prove that something
does *not* happen.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from local.invariants import Report, check, load_records
from local.jsonl_tail import read_jsonl
from local.polling import wait_until
from local.testbed import EventTail
from local.upstream_sim import UpstreamSimulator, payload_for, run_in_thread
from local.worker_process import WorkerProcess, scaled_settings
from streamlease import aws, checkpoints, rules
from streamlease.commands import Command, CommandType
from streamlease.model import Stream
from streamlease.schema import PK, SESSION_HELD_MS, DesiredState, StreamAttr, stream_key
from streamlease.seqs import NOTHING_DELIVERED
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from worker.sinks import sink_file_name

LEASE_SECONDS: Final = 1.0
HEARTBEAT_SECONDS: Final = 0.25
RATE: Final = 20.0
"""Messages per second per simulated stream."""
START_TIMEOUT: Final = 20.0
"""Bound on "a worker came up and took its streams" on a loaded two-core machine."""


def worker_settings(aws_settings: Settings, run_dir: Path, **overrides: Any) -> Settings:
    """Settings for test workers: production ratios at a 1 s lease, file sink under ``run_dir``."""
    values: dict[str, Any] = {
        "reconcile_seconds": 0.5,
        "fence_margin_seconds": 0.3,
        "clock_skew_seconds": 0.1,
        "poll_wait_seconds": 1.0,
        "rebalance_seconds": 0.5,
        "min_tenure_seconds": 1.0,
        "shutdown_budget_seconds": 15.0,
        "metrics_flush_seconds": 1.0,
        "health_max_age_seconds": 5.0,
        "backoff_base_seconds": 0.05,
        "backoff_max_seconds": 0.5,
        "sink": "file",
        "sink_dir": str(run_dir / "sink"),
    }
    values.update(overrides)
    return scaled_settings(aws_settings, lease_seconds=LEASE_SECONDS, **values)


# --- streams and commands ----------------------------------------------------------------------


class Streams:
    """Seeds and inspects stream items directly (the control plane is not under test here)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.dynamodb = aws.client("dynamodb", settings)
        self.sqs = aws.client("sqs", settings)

    def put(
        self,
        stream_id: str,
        ws_url: str,
        *,
        command: bool = True,
        profile: dict[str, Any] | None = None,
        held: tuple[str, int, int, int] | None = None,
        shard: str | None = None,
    ) -> None:
        """A new STARTED stream item (never owned, with ``profile`` as the API stores it), then
        a START command unless told not to.

        ``held``: ``(session, epoch, slot, last_seq)``: the item as a session holding the
        stream left it (no command is sent). ``shard``: its orphan-index entry
        (``expiry_shard``), as a writer of that fleet's mode keys it (none if not given)."""
        item: dict[str, Any] = {
            PK: {"S": stream_key(stream_id)},
            StreamAttr.STREAM_ID: {"S": stream_id},
            StreamAttr.DESIRED_STATE: {"S": DesiredState.STARTED.value},
            StreamAttr.WS_URL: {"S": ws_url},
            StreamAttr.LEASE_EXPIRES_AT_MS: {"N": "0"},
            StreamAttr.LEASE_EPOCH: {"N": "0"},
            StreamAttr.LAST_SEQ: {"N": str(NOTHING_DELIVERED)},
            StreamAttr.GENERATION: {"N": "1"},
        }
        if shard is not None:
            item[StreamAttr.EXPIRY_SHARD] = {"S": shard}
        if profile is not None:
            item[StreamAttr.PROFILE] = TypeSerializer().serialize(profile)
        if held is not None:
            owner, epoch, slot, last_seq = held
            item |= {
                StreamAttr.LEASE_OWNER: {"S": owner},
                StreamAttr.LEASE_EXPIRES_AT_MS: {"N": str(SESSION_HELD_MS)},
                StreamAttr.LEASE_EPOCH: {"N": str(epoch)},
                StreamAttr.LEASE_SLOT: {"N": str(slot)},
                StreamAttr.LAST_SEQ: {"N": str(last_seq)},
            }
            command = False
        self.dynamodb.put_item(TableName=self.settings.table_name, Item=item)
        if command:
            self.send(Command(CommandType.START, stream_id, 1).to_json())

    def put_held(
        self, stream_id: str, ws_url: str, *, session: str, epoch: int, last_seq: int
    ) -> None:
        """A STARTED stream item attached to ``session`` (slot 0) at ``epoch``, checkpoint
        ``last_seq``: what an acquire through that session wrote."""
        self.put(stream_id, ws_url, command=False)
        self.dynamodb.update_item(
            TableName=self.settings.table_name,
            Key={PK: {"S": stream_key(stream_id)}},
            UpdateExpression="SET #o = :o, #x = :x, #e = :e, #s = :s, #q = :q",
            ExpressionAttributeNames={
                "#o": StreamAttr.LEASE_OWNER,
                "#x": StreamAttr.LEASE_EXPIRES_AT_MS,
                "#e": StreamAttr.LEASE_EPOCH,
                "#s": StreamAttr.LEASE_SLOT,
                "#q": StreamAttr.LAST_SEQ,
            },
            ExpressionAttributeValues={
                ":o": {"S": session},
                ":x": {"N": str(SESSION_HELD_MS)},
                ":e": {"N": str(epoch)},
                ":s": {"N": "0"},
                ":q": {"N": str(last_seq)},
            },
        )

    def send(self, body: str) -> None:
        """Put a raw message body on the command queue."""
        self.sqs.send_message(QueueUrl=self.settings.queue_url, MessageBody=body)

    def stop(self, stream_id: str) -> None:
        """desired_state STOPPED, generation + 1 (what ``POST /streams/{id}/stop`` writes)."""
        self.dynamodb.update_item(
            TableName=self.settings.table_name,
            Key={PK: {"S": stream_key(stream_id)}},
            UpdateExpression="SET #s = :stopped, #g = #g + :one",
            ExpressionAttributeNames={
                "#s": StreamAttr.DESIRED_STATE,
                "#g": StreamAttr.GENERATION,
            },
            ExpressionAttributeValues={":stopped": {"S": "STOPPED"}, ":one": {"N": "1"}},
        )

    def read(self, stream_id: str) -> Stream:
        """The item as it is now (consistent read)."""
        return Stream.from_item(self.item(stream_id))

    def item(self, stream_id: str) -> dict[str, Any]:
        """The item's attributes as it is now (consistent read), plain values."""
        response = self.dynamodb.get_item(
            TableName=self.settings.table_name,
            Key={PK: {"S": stream_key(stream_id)}},
            ConsistentRead=True,
        )
        de = TypeDeserializer()
        return {k: de.deserialize(v) for k, v in response["Item"].items()}

    def checkpoint(self, stream_id: str) -> int:
        """How far the stream got: its item's ``last_seq``, or, while it is held through a
        session, the larger checkpoint that session's last renewal carried for it."""
        stream = self.read(stream_id)
        if not (stream.held_by_session and stream.owner and stream.slot is not None):
            return stream.last_seq
        session = SessionStore(self.dynamodb, self.settings.table_name).read(stream.owner)
        entry = checkpoints.entry_at(session.checkpoints if session else None, stream.slot)
        live = rules.checkpoint_for(entry, stream.stream_id, stream.epoch)
        return stream.last_seq if live is None else max(stream.last_seq, live)

    def queue_depth(self, *, dead_letter: bool = False) -> int:
        """Messages visible or in flight on the command queue (or its DLQ)."""
        url = self.settings.queue_url + ("-dlq" if dead_letter else "")
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )


def new_ids(count: int, prefix: str = "s") -> list[str]:
    """``count`` fresh stream ids."""
    tag = uuid.uuid4().hex[:6]
    return [f"{prefix}{i:02d}-{tag}" for i in range(count)]


# --- the fleet ---------------------------------------------------------------------------------


class Fleet:
    """Worker processes of one test, their lease events and their sink records."""

    def __init__(self, settings: Settings, run_dir: Path) -> None:
        self.settings = settings
        self.run_dir = run_dir
        self.sink_dir = Path(settings.sink_dir)
        self.workers: list[WorkerProcess] = []
        self.tail = EventTail()

    def start(
        self, name: str | None = None, *, command: Sequence[str] = (), **overrides: Any
    ) -> WorkerProcess:
        """Start one worker; its id is ``<name>-<hex>/<pid>-like`` and fixed up front.
        ``command``: Python arguments that run it some other way than ``-m worker``."""
        name = name or f"w{len(self.workers) + 1}"
        worker_id = f"{name}-{uuid.uuid4().hex[:6]}/1-0000"
        slug = worker_id.replace("/", "_")
        events = self.run_dir / "events" / f"{slug}.jsonl"
        settings = dataclasses.replace(
            self.settings,
            worker_id=worker_id,
            lease_event_log=str(events),
            health_file=str(self.run_dir / "health" / slug),
            **overrides,
        )
        (self.run_dir / "health").mkdir(parents=True, exist_ok=True)
        self.tail.add(events)
        log = self.run_dir / "logs" / f"{slug}.log"
        if command:
            worker = WorkerProcess.start(settings, name, log, command=command)
        else:
            worker = WorkerProcess.start(settings, name, log)
        self.workers.append(worker)
        return worker

    def owners(self) -> dict[str, str]:
        """Stream → worker id of every holder that may deliver now (from the lease events)."""
        from local.invariants import current_owners

        self.tail.refresh()
        return current_owners(self.tail.events, time.monotonic())

    def held_by(self, worker: WorkerProcess) -> set[str]:
        """Streams ``worker`` holds now."""
        return {s for s, w in self.owners().items() if w == worker.worker_id}

    def events(self, kind: str | None = None, stream_id: str | None = None) -> list[Any]:
        """Lease events so far, optionally of one kind and one stream."""
        self.tail.refresh()
        return [
            e
            for e in self.tail.events
            if (kind is None or e.event == kind) and (stream_id is None or e.stream_id == stream_id)
        ]

    def wait_owned(self, stream_ids: Iterable[str], timeout_seconds: float = START_TIMEOUT) -> None:
        """Wait until every one of ``stream_ids`` has a live holder."""
        wanted = set(stream_ids)
        self.wait(lambda: wanted <= set(self.owners()), timeout_seconds, f"{len(wanted)} owned")

    def wait(self, condition: Callable[[], Any], timeout_seconds: float, what: str) -> Any:
        """:func:`local.polling.wait_until` that shows the workers' logs when it times out."""
        try:
            return wait_until(condition, timeout_seconds, what, every_seconds=0.05)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.diagnosis()}") from None

    def records(self, stream_id: str) -> list[dict[str, Any]]:
        """The sink records of ``stream_id`` in file order (a torn last line is skipped)."""
        records, _ = read_jsonl([self.sink_dir / sink_file_name(stream_id)], dict)
        return records

    def seqs(self, stream_id: str) -> list[int]:
        """The seqs delivered for ``stream_id``, in delivery order."""
        return [int(r["seq"]) for r in self.records(stream_id)]

    def wait_seq(self, stream_id: str, seq: int, timeout_seconds: float = START_TIMEOUT) -> None:
        """Wait until ``stream_id`` delivered ``seq`` or later."""
        self.wait(
            lambda: max(self.seqs(stream_id), default=NOTHING_DELIVERED) >= seq,
            timeout_seconds,
            f"{stream_id} reached seq {seq}",
        )

    def report(self, **kwargs: Any) -> Report:
        """The invariant checker's verdict on everything recorded so far."""
        self.tail.refresh()
        records, malformed = load_records(self.sink_dir)
        options: dict[str, Any] = {
            "expected_first_seq": 1,
            "verify_payload": simulator_payload,
            "malformed_lines": malformed + self.tail.malformed,
        }
        options.update(kwargs)
        return check(self.tail.events, records, **options)

    def stop_all(self) -> None:
        """SIGTERM every live worker, then SIGKILL what is still running after the budget."""
        live = [w for w in self.workers if w.alive]
        for worker in live:
            worker.terminate(0)
        for worker in live:
            worker.stop(self.settings.shutdown_budget_seconds + 5)

    def diagnosis(self, lines: int = 40) -> str:
        """The tail of every worker's log without its per-second metrics lines (which would
        crowd out the events that say what happened), then its last metrics line."""
        parts = []
        for w in self.workers:
            state = "running" if w.alive else f"exited {w.process.returncode}"
            events: list[str] = []
            last_metrics = ""
            for line in w.log_tail(10_000).splitlines():
                if line.startswith('{"_aws"') or '"message":"metrics flushed"' in line:
                    last_metrics = line
                else:
                    events.append(line)
            tail = "\n".join([*events[-lines:], last_metrics])
            parts.append(f"--- {w.worker_id} ({state}) ---\n{tail}")
        return "\n".join(parts)

    def log_records(self, worker: WorkerProcess) -> list[dict[str, Any]]:
        """The JSON lines of ``worker``'s output (logs and EMF documents)."""
        out = []
        try:
            text = worker.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        for line in text.splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out


def simulator_payload(record: Any) -> bool:
    """A sink record carries the simulator's frame for its seq, untouched."""
    payload = record.payload
    return (
        isinstance(payload, dict)
        and payload.get("seq") == record.seq
        and payload.get("data") == payload_for(record.stream_id, record.seq)
    )


def assert_no_gap(seqs: list[int], first: int = 1) -> None:
    """Every seq from ``first`` to the highest delivered was delivered at least once."""
    assert seqs, "nothing was delivered"
    missing = sorted(set(range(first, max(seqs) + 1)) - set(seqs))
    assert not missing, f"missing seqs: {missing[:20]}"


# --- fixtures (import them into a test module to use them) -------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[UpstreamSimulator]:
    """One upstream simulator per test module (streams are unique per test)."""
    with run_in_thread(default_rate=RATE) as sim:
        yield sim


@pytest.fixture
def settings(aws_settings: Settings, tmp_path: Path) -> Settings:
    """Scaled worker settings on this test's fresh resources."""
    return worker_settings(aws_settings, tmp_path)


@pytest.fixture
def streams(settings: Settings) -> Streams:
    """Seeding and inspection of this test's stream items."""
    return Streams(settings)


@pytest.fixture
def fleet(settings: Settings, tmp_path: Path) -> Iterator[Fleet]:
    """Worker processes of this test; every one is stopped (then killed) at the end."""
    group = Fleet(settings, tmp_path)
    try:
        yield group
    finally:
        for worker in group.workers:
            if worker.paused:
                worker.signal(signal.SIGCONT)
        group.stop_all()
