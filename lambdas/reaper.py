"""The reaper Lambda: when an ECS task has stopped, free the streams its workers still held.

A stopped task is certainly dead, so no waiting is needed: each of its sessions is tombstoned at
once (no ``hb`` condition: ECS said so), and each stream still attached to one of them is
released at its exact owner and epoch, with ``last_seq`` moved up to the session's checkpoint
vector (architecture §4a, "Crash fast path"), and handed off with a HANDOFF command if it is
STARTED: failover costs about a second instead of a lease. Per-stream leases
(``liveness = stream``) are released the same way (their checkpoint is on the stream item).

Which workers ran in the task: session ids continue the ECS task id (the last segment of the
task ARN) after a separator (:func:`streamlease.schema.belongs_to_task`); sessions whose
``task_arn`` is the stopped task add any that do not. The leases are found in the sparse
``by-holder`` index, one query per session: a session item outlives its last stream (the fleet's
sweeps delete a tombstone only once it owns nothing, leases after it was written), so the whole
index is scanned (at a million streams, every lease read for one stopped task) only when no
session of the task can be read at all. The tombstones stay for the workers' sweeps, which
delete them.

Idempotent: a redelivered event finds nothing left to release and sends nothing. The local
supervisor calls this same handler with :func:`stopped_task_event` when a worker process exits.

Every stopped task is also counted: ``UnplannedTaskStops`` is 1 for a task that stopped
outside a deployment or scale-in (:func:`is_planned_stop`), 0 otherwise. One such stop is a
crash the reaper just cleaned up after; several within minutes are a crash loop, which the
deployment's alarm watches (the circuit breaker only watches deployments).
The event is read through Powertools' ``EventBridgeEvent`` data class (a dict wrapper: no
validation library is imported on this cold-start path); Powertools has no class for the ECS
task state change's ``detail``, so its three fields are read here. Handoffs carry this run's
trace header, so the workers' acquires join the reaper's trace.
"""

from __future__ import annotations

import enum
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas import runtime
from lambdas.commands import handoff_command, send_command
from lambdas.metrics import MetricEmitter
from lambdas.tracing import command_trace_header, tracer
from streamlease import checkpoints, dynamo, rules
from streamlease.errors import StoreError
from streamlease.indexes import BY_OWNER
from streamlease.model import LeaseView
from streamlease.schema import DesiredState, StopCode, StreamAttr, belongs_to_task, task_id_of
from streamlease.telemetry import REAPER_SERVICE, ApiMetric, ReaperMetric

if TYPE_CHECKING:
    pass

logger = Logger(service=REAPER_SERVICE, level=runtime.current().settings.log_level)
metrics = MetricEmitter(REAPER_SERVICE)

DETAIL_TYPE: Final = "ECS Task State Change"
STOPPED: Final = "STOPPED"
_MAX_ERROR_CHARS: Final = 200
PLANNED_STOP_CODES: Final = frozenset(
    {StopCode.USER_INITIATED, StopCode.SPOT_INTERRUPTION, StopCode.TERMINATION_NOTICE}
)
"""ECS stop codes of a stop someone or something planned: ``ecs stop-task``, a Spot
reclaim, Fargate's maintenance retiring the task (each with notice and a graceful drain)."""
SCALING_REASON_PREFIX: Final = "Scaling activity initiated by"
"""How ECS's service scheduler words a stop of a deployment or a scale-in; it words a failed
health check otherwise ("Task failed container health checks")."""
_PARALLEL_RELEASES: Final = 16


def stopped_task_event(
    task_arn: str, *, stop_code: str = StopCode.CONTAINER_EXITED
) -> dict[str, Any]:
    """An EventBridge "ECS Task State Change" event saying ``task_arn`` has stopped.

    What the local supervisor sends when a worker process exits.
    """
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": DETAIL_TYPE,
        "source": "aws.ecs",
        "time": "1970-01-01T00:00:00Z",
        "resources": [task_arn],
        "detail": {"taskArn": task_arn, "lastStatus": STOPPED, "stopCode": stop_code},
    }


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@tracer.capture_lambda_handler
@event_source(data_class=EventBridgeEvent)
def _handle(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    try:
        detail_type, detail = event.detail_type, event.detail
    except KeyError:
        detail_type, detail = None, None
    if not isinstance(detail, dict) or detail_type != DETAIL_TYPE:
        logger.info("event ignored", reason="not an ECS task state change")
        return {"ignored": "not an ECS task state change"}
    if detail.get("lastStatus") != STOPPED:
        return {"ignored": "task not stopped"}
    task_arn = detail.get("taskArn")
    if not isinstance(task_arn, str) or not task_id_of(task_arn):
        logger.warning("event ignored", reason="no task ARN")
        return {"ignored": "no task ARN"}
    stop_code = str(detail.get("stopCode") or "unknown")[:64]
    result = reap(task_arn, task_id_of(task_arn), stop_code)
    # Counted once the reap succeeded: a failed one raises and EventBridge delivers the event
    # again, and one crash counted once per delivery would look like a crash loop.
    planned = is_planned_stop(stop_code, str(detail.get("stoppedReason") or ""))
    metrics.emit({ReaperMetric.UNPLANNED_TASK_STOPS: 0 if planned else 1})
    if not planned:
        logger.warning("task stopped unplanned", task_id=task_id_of(task_arn), stop_code=stop_code)
    return result


def is_planned_stop(stop_code: str, stopped_reason: str) -> bool:
    """True when a worker task stopped because it was meant to: a deployment or scale-in
    (the service scheduler's "Scaling activity initiated by ..."), an operator's StopTask, a
    Spot or Fargate maintenance notice. A crash (``EssentialContainerExited``), a task that
    failed to start, a failed health check, or anything unknown is unplanned."""
    if stop_code in PLANNED_STOP_CODES:
        return True
    scheduled = stop_code == StopCode.SERVICE_SCHEDULER
    return scheduled and stopped_reason.startswith(SCALING_REASON_PREFIX)


def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Release the leases of a stopped ECS task's workers; returns what was done."""
    result: dict[str, Any] = _handle(event, context)
    return result


def reap(task_arn: str, task_id: str, stop_code: str) -> dict[str, Any]:
    """Tombstone the stopped task's sessions, release every lease they held and hand the
    streams off.

    Raises :class:`StoreError` after trying every lease if some could not be released, so the
    event is delivered again (only the remaining ones will be found then).
    """
    rt = runtime.current()
    trace_header = command_trace_header()
    vectors = _tombstone_sessions(rt, task_arn, task_id)
    held = _leases_of(rt, set(vectors), task_id)
    # A task held up to its capacity of streams; each is a write and a send, so they go in
    # parallel (boto3 clients are thread-safe) to hand the streams off within a second.
    with ThreadPoolExecutor(max_workers=_PARALLEL_RELEASES) as pool:
        outcomes = list(
            pool.map(
                lambda lease: _reap_lease(
                    rt, lease, vectors.get(str(lease.owner)), stop_code, trace_header
                ),
                held,
            )
        )
    released = sum(o in _RELEASED for o in outcomes)
    handoffs = outcomes.count(_Outcome.HANDED_OFF)
    failures = outcomes.count(_Outcome.FAILED)
    send_failures = outcomes.count(_Outcome.SEND_FAILED)
    metrics.emit({ReaperMetric.LEASES_RELEASED: released})
    if send_failures:
        metrics.emit({ApiMetric.COMMAND_SEND_FAILURES: send_failures})
    owners = sorted(set(vectors) | {str(lease.owner) for lease in held})
    logger.info(
        "task reaped",
        task_id=task_id,
        workers=owners,
        released=released,
        handoffs=handoffs,
        failures=failures,
    )
    if failures:
        raise StoreError(f"{failures} lease(s) of task {task_id} could not be released")
    return {"task_id": task_id, "workers": owners, "released": released, "handoffs": handoffs}


class _Outcome(enum.Enum):
    NOTHING = "nothing to release"
    FAILED = "release failed"
    RELEASED = "released"
    HANDED_OFF = "released and handed off"
    SEND_FAILED = "released, handoff not sent"


_RELEASED: Final = frozenset({_Outcome.RELEASED, _Outcome.HANDED_OFF, _Outcome.SEND_FAILED})


def _tombstone_sessions(
    rt: runtime.Runtime, task_arn: str, task_id: str
) -> dict[str, bytes | None]:
    """Tombstone every session of the task; returns their checkpoint vectors by session id."""
    vectors: dict[str, bytes | None] = {}
    for session in rt.sessions.list_fleet():
        sid = session.worker_id
        if not (belongs_to_task(sid, task_id) or session.task_arn == task_arn):
            continue
        expiry = rt.sessions.expire(sid, by="reaper", seen_hb=None)
        # Already a tombstone (a peer or an earlier delivery wrote it): read its vector.
        found = expiry.session if expiry.won else rt.sessions.read(sid)
        vectors[sid] = None if found is None else found.checkpoints
        if expiry.won:
            logger.info("session expired", session=sid)
    return vectors


def _reap_lease(
    rt: runtime.Runtime,
    lease: LeaseView,
    vector: bytes | None,
    stop_code: str,
    trace_header: str | None,
) -> _Outcome:
    """Release one lease of the dead task and, for a STARTED stream, send its handoff (with
    ``trace_header``, this run's)."""
    assert lease.owner is not None
    entry = checkpoints.entry_at(vector, lease.slot) if lease.slot is not None else None
    message = f"worker {lease.owner} stopped holding the lease (ECS {stop_code})"
    try:
        stream = rt.leases.release_for(
            lease.stream_id,
            lease.owner,
            lease.epoch,
            rules.checkpoint_for(entry, lease.stream_id, lease.epoch),
            last_error=message[:_MAX_ERROR_CHARS],
        )
    except StoreError as exc:
        logger.warning("release failed", stream_id=lease.stream_id, error=str(exc))
        return _Outcome.FAILED
    if stream is None:
        return _Outcome.NOTHING  # released, taken over or deleted since the index was read
    logger.info("lease released", stream_id=lease.stream_id, epoch=lease.epoch)
    if stream.desired_state is not DesiredState.STARTED:
        return _Outcome.RELEASED
    sent = send_command(
        rt.sqs,
        rt.settings.queue_url,
        handoff_command(lease.stream_id, stream.generation),
        logger=logger,
        trace_header=trace_header,
    )
    return _Outcome.HANDED_OFF if sent else _Outcome.SEND_FAILED


def _leases_of(rt: runtime.Runtime, worker_ids: set[str], task_id: str) -> list[LeaseView]:
    """Leases whose owner is one of the task's sessions: one ``by-holder`` query per session.
    Only when no session item of the task can be read at all (deleted, or not yet visible to
    the fleet index) are the owners looked for by their id, in a scan of the index."""
    if worker_ids:
        found = [lease for sid in sorted(worker_ids) for lease in rt.leases.owned_by(sid)]
    else:
        scan = dynamo.items(
            rt.dynamodb.scan, {"TableName": rt.settings.table_name, "IndexName": BY_OWNER.name}
        )
        found = [
            LeaseView.from_item(item)
            for item in scan
            if belongs_to_task(str(item.get(StreamAttr.LEASE_OWNER, "")), task_id)
        ]
    return sorted(found, key=lambda lease: lease.stream_id)
