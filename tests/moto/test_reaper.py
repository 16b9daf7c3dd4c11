"""The reaper on the stored ECS "task stopped" event: release the dead task's leases, hand off."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from control_plane_support import Api, CommandQueue, load_event

from lambdas import reaper, runtime
from local.lambda_context import LambdaContext
from streamlease import checkpoints
from streamlease.commands import CommandType
from streamlease.errors import StoreError
from streamlease.lease_store import LeaseStore, wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import DesiredState, WorkerState
from streamlease.seqs import NOTHING_DELIVERED
from streamlease.session_store import SessionStore

URL = "wss://feed.example.com/v1"
TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/streamlease/8f1c2bde0a9e4d55b7c3e1f2a4b6c8d0"
TASK_ID = "8f1c2bde0a9e4d55b7c3e1f2a4b6c8d0"
DEAD = f"{TASK_ID}/7-ab12"
"""The dead task's worker, with a worker item."""
CUSTOM = "custom-name-1"
"""A worker of the dead task whose id does not start with the task id (item says its task)."""
ALIVE = "0123456789abcdef0123456789abcdef/7-ef56"
"""A worker of another, live task."""


def worker_item(worker_id: str, task_arn: str) -> WorkerInfo:
    now = wall_ms()
    return WorkerInfo(
        worker_id=worker_id,
        state=WorkerState.RUNNING,
        heartbeat_at_ms=now,
        expires_at_ms=now + 20_000,
        active_streams=1,
        capacity=10,
        host="ip-10-0-0-1",
        pid=7,
        task_arn=task_arn,
    )


@pytest.fixture
def fleet(
    api: Api, store: LeaseStore, sessions: SessionStore, commands: CommandQueue
) -> dict[str, int]:
    """Streams held by the dead task's workers and by a live one; returns epochs by stream.

    Workers with a session item hold their streams through it (a slot each); DEAD's last
    renewal checkpointed stream ``a`` at seq 40 (its item still says 0)."""
    owners = {
        "a": DEAD,
        "b": DEAD,
        "c": DEAD,
        "d": CUSTOM,
        "e": ALIVE,
        "f": DEAD,  # stopped while held: released without a handoff
    }
    sessions.create(worker_item(DEAD, TASK_ARN))
    sessions.create(worker_item(CUSTOM, TASK_ARN))
    sessions.create(worker_item(ALIVE, TASK_ARN.replace(TASK_ID, ALIVE.split("/")[0])))
    epochs = {}
    slots: dict[str, int] = {}
    for stream_id, owner in owners.items():
        assert api("POST", "/streams", body={"id": stream_id, "ws_url": URL}).status == 201
        slot = slots.setdefault(owner, 0)
        slots[owner] += 1
        epochs[stream_id] = store.acquire(stream_id, owner, 20_000, slot=slot).epoch
    api("POST", "/streams/f/stop")
    sessions.renew(
        DEAD,
        expires_at_ms=wall_ms() + 40_000,
        now_ms=wall_ms(),
        active_streams=3,
        checkpoints=checkpoints.encode(
            [
                checkpoints.Checkpoint(epochs[s], seq, checkpoints.stream_tag(s))
                for s, seq in (("a", 40), ("b", 0))
            ]
        ),
    )
    commands.drain()
    return epochs


def test_stopped_task_leases_are_released_and_handed_off(
    fleet: dict[str, int], store: LeaseStore, commands: CommandQueue
) -> None:
    """Every lease of the dead task is released and each STARTED stream gets a HANDOFF."""
    result = reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    assert result["released"] == 5
    assert result["handoffs"] == 4
    assert set(result["workers"]) == {DEAD, CUSTOM}
    for stream_id in "abcdf":
        stream = store.read(stream_id)
        assert stream is not None
        assert (stream.owner, stream.expires_at_ms, stream.slot) == (None, 0, None)
        assert stream.epoch == fleet[stream_id]  # released, not re-acquired
        assert stream.takeovers == 1
        assert "stopped holding the lease" in (stream.last_error or "")
    sent = sorted((c.stream_id, c.type, c.generation) for c in commands.drain())
    assert sent == [(s, CommandType.HANDOFF, 1) for s in "abcd"]


def test_a_released_stream_resumes_at_its_sessions_checkpoint(
    fleet: dict[str, int], store: LeaseStore
) -> None:
    """The dead session's last renewal carried stream a's checkpoint: the next owner resumes
    there, not at the stale seq on the stream item."""
    reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    assert [store.read(s).last_seq for s in "ab"] == [40, 0]  # type: ignore[union-attr]


def renew_dead_with(sessions: SessionStore, vector: bytes) -> None:
    sessions.renew(
        DEAD,
        expires_at_ms=wall_ms() + 60_000,
        now_ms=wall_ms(),
        active_streams=3,
        checkpoints=vector,
    )


def test_an_entry_of_another_stream_in_the_slot_is_not_applied(
    fleet: dict[str, int], store: LeaseStore, sessions: SessionStore
) -> None:
    """Slot 0 (stream a's, by its item) carries an entry of a's epoch but b's tag: another
    stream was given the slot while a's item still named it. a resumes at its item's seq."""
    wrong = checkpoints.Checkpoint(fleet["a"], 999, checkpoints.stream_tag("b"))
    renew_dead_with(sessions, checkpoints.encode([wrong]))
    reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    assert store.read("a").last_seq == NOTHING_DELIVERED  # type: ignore[union-attr]


def test_an_untagged_vector_of_an_older_worker_is_applied_by_epoch(
    fleet: dict[str, int], store: LeaseStore, sessions: SessionStore
) -> None:
    """During a rolling deploy a session of the previous version carries the untagged format:
    its entries count for the epoch they name, as that version would have counted them."""
    renew_dead_with(sessions, bytes([checkpoints.UNTAGGED_VERSION, fleet["a"], 40]))
    reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    assert store.read("a").last_seq == 40  # type: ignore[union-attr]


def test_the_dead_tasks_sessions_are_tombstoned_and_others_untouched(
    fleet: dict[str, int], store: LeaseStore, sessions: SessionStore
) -> None:
    """A live task's worker keeps its lease and its session; the dead task's sessions are
    EXPIRED, so a late renewal of theirs can never succeed."""
    reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    alive = store.read("e")
    assert alive is not None
    assert (alive.owner, alive.epoch) == (ALIVE, fleet["e"])
    states = {w.worker_id: w.state for w in sessions.list_fleet()}
    assert states == {
        ALIVE: WorkerState.RUNNING,
        DEAD: WorkerState.EXPIRED,
        CUSTOM: WorkerState.EXPIRED,
    }


def test_redelivered_event_changes_nothing(
    fleet: dict[str, int], store: LeaseStore, commands: CommandQueue
) -> None:
    """EventBridge may deliver twice: the second run releases nothing and sends nothing."""
    event = load_event("ecs_task_stopped")
    reaper.handler(event, LambdaContext())
    commands.drain()
    before = {s: store.read(s) for s in "abcdef"}
    again = reaper.handler(copy.deepcopy(event), LambdaContext())
    assert (again["released"], again["handoffs"]) == (0, 0)
    assert commands.drain() == []
    assert {s: store.read(s) for s in "abcdef"} == before


def test_lease_taken_over_meanwhile_is_left_alone(
    fleet: dict[str, int], store: LeaseStore, commands: CommandQueue
) -> None:
    """A stream another worker took over after the lapse is not released by the reaper."""
    store.release("a", DEAD, fleet["a"])
    taken = store.acquire("a", ALIVE, 20_000, slot=9)
    result = reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    stream = store.read("a")
    assert stream is not None
    assert (stream.owner, stream.epoch) == (ALIVE, taken.epoch)
    assert "a" not in {c.stream_id for c in commands.drain()}
    assert result["released"] == 4


def test_running_task_event_is_ignored(fleet: dict[str, int], store: LeaseStore) -> None:
    """Only STOPPED matters; a RUNNING state change releases nothing."""
    result = reaper.handler(load_event("ecs_task_running"), LambdaContext())
    assert "ignored" in result
    stream = store.read("a")
    assert stream is not None and stream.owner == DEAD


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"detail-type": "Scheduled Event", "detail": {}},
        {"detail-type": "ECS Task State Change", "detail": "x"},
        {"detail-type": "ECS Task State Change", "detail": {"lastStatus": "STOPPED"}},
        {
            "detail-type": "ECS Task State Change",
            "detail": {"lastStatus": "STOPPED", "taskArn": ""},
        },
        {"detail-type": "ECS Task State Change", "detail": {"lastStatus": "STOPPED", "taskArn": 5}},
    ],
)
def test_malformed_events_are_ignored(
    control_plane: runtime.Runtime, event: dict[str, Any]
) -> None:
    """Events that do not name a stopped task are ignored, never a crash."""
    assert "ignored" in reaper.handler(event, LambdaContext())


def test_the_leases_are_found_per_session_without_a_scan(
    fleet: dict[str, int], control_plane: runtime.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One by-owner query per session of the task: at a million streams a scan of every lease
    for each stopped task would read the whole index."""
    client = control_plane.dynamodb
    scans: list[Any] = []
    real_scan = client.scan
    monkeypatch.setattr(client, "scan", lambda **kw: scans.append(kw) or real_scan(**kw))
    result = reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    assert result["released"] == 5
    assert scans == []


def test_local_synthetic_event_reaps_a_local_worker(
    api: Api, store: LeaseStore, commands: CommandQueue
) -> None:
    """The local supervisor's event (worker id = task id) releases that worker's streams, even
    when no session item of the task can be read any more (a scan for its id finds them)."""
    worker_id = "w1-0a1b2c3d"
    api("POST", "/streams", body={"id": "s1", "ws_url": URL})
    store.acquire("s1", worker_id, 20_000)
    commands.drain()
    event = reaper.stopped_task_event(f"arn:aws:ecs:us-east-1:000000000000:task/local/{worker_id}")
    result = reaper.handler(event, LambdaContext())
    assert (result["released"], result["handoffs"]) == (1, 1)
    assert [(c.stream_id, c.type) for c in commands.drain()] == [("s1", CommandType.HANDOFF)]


def reap_during_an_outage(moto_server: Any) -> None:
    """Deliver the stored event with DynamoDB down; the handler must raise."""
    moto_server.set_dynamodb_down(True)
    try:
        with pytest.raises(StoreError):
            reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    finally:
        moto_server.set_dynamodb_down(False)


def test_outage_makes_the_event_retry(fleet: dict[str, int], moto_server: Any) -> None:
    """With DynamoDB down the handler raises, so EventBridge/Lambda delivers the event again."""
    reap_during_an_outage(moto_server)


def test_stopped_stream_released_without_handoff(
    fleet: dict[str, int], store: LeaseStore, commands: CommandQueue
) -> None:
    """A STOPPED stream held by the dead worker is released but not handed off."""
    reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    stream = store.read("f")
    assert stream is not None
    assert (stream.owner, stream.desired_state) == (None, DesiredState.STOPPED)
    assert "f" not in {c.stream_id for c in commands.drain()}


def _unplanned_stops(out: str) -> list[float]:
    """The UnplannedTaskStops values of the EMF documents in ``out``."""
    documents = [json.loads(line) for line in out.splitlines() if '"_aws"' in line]
    return [v for d in documents if "UnplannedTaskStops" in d for v in d["UnplannedTaskStops"]]


def test_a_crashed_task_counts_as_an_unplanned_stop(
    fleet: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """The stored event (essential container exited) publishes UnplannedTaskStops 1."""
    reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    assert _unplanned_stops(capsys.readouterr().out) == [1.0]


def test_a_deployment_stop_is_counted_as_planned(
    fleet: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """A task the scheduler stopped for a deployment publishes 0, and is still reaped."""
    event = copy.deepcopy(load_event("ecs_task_stopped"))
    event["detail"]["stopCode"] = "ServiceSchedulerInitiated"
    event["detail"]["stoppedReason"] = "Scaling activity initiated by (deployment ecs-svc/42)"
    assert reaper.handler(event, LambdaContext())["released"] == 5
    assert _unplanned_stops(capsys.readouterr().out) == [0.0]


def test_a_reap_that_fails_counts_no_stop_so_its_retries_count_it_once(
    fleet: dict[str, int], moto_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """EventBridge redelivers an event whose reap failed: only the delivery that succeeds
    counts the stop, or a single crash during an outage would look like a crash loop."""
    reap_during_an_outage(moto_server)
    assert _unplanned_stops(capsys.readouterr().out) == []
    reaper.handler(load_event("ecs_task_stopped"), LambdaContext())
    assert _unplanned_stops(capsys.readouterr().out) == [1.0]
