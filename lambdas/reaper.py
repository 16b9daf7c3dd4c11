"""The reaper Lambda: when an ECS task has stopped, free the leases its worker still held.

A stopped task is certainly dead, so its leases can be released at once (condition owner +
epoch, so a lease someone else has taken meanwhile is left alone) and a HANDOFF hint sent for
each STARTED stream: failover costs a second instead of a lease duration (DESIGN §4).

Which workers ran in the task: worker ids start with the ECS task id (the last segment of the
task ARN) followed by a non-alphanumeric separator, e.g. ``<task id>/<pid>-<suffix>``; worker
items whose ``task_arn`` is the stopped task add any that do not. The leases are found in the
sparse ``by-owner`` index, so a worker that died before writing its item is covered too.

Idempotent: a redelivered event finds nothing left to release and sends nothing. The local
supervisor calls this same handler with :func:`stopped_task_event` when a worker process exits.
"""

from __future__ import annotations

import enum
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths

from lambdas import runtime
from lambdas.commands import handoff_command, send_command
from streamlease import dynamo
from streamlease.errors import LeaseLost, StoreError
from streamlease.model import LeaseView, Stream
from streamlease.schema import (
    BY_KIND,
    BY_OWNER,
    PK,
    WORKER_KIND,
    DesiredState,
    StreamAttr,
    WorkerAttr,
    worker_id_of,
    worker_key,
)
from streamlease.telemetry import REAPER_SERVICE, ApiMetric, ReaperMetric

logger = Logger(service=REAPER_SERVICE, level=runtime.current().settings.log_level)
metrics = runtime.MetricEmitter(REAPER_SERVICE)

DETAIL_TYPE: Final = "ECS Task State Change"
STOPPED: Final = "STOPPED"
_MAX_ERROR_CHARS: Final = 200
_PARALLEL_RELEASES: Final = 16


def task_id_of(task_arn: str) -> str:
    """The task id: the last ``/`` segment of an ECS task ARN (the whole string if none)."""
    return task_arn.strip().rsplit("/", 1)[-1]


def belongs_to_task(worker_id: str, task_id: str) -> bool:
    """True when ``worker_id`` names a worker of task ``task_id`` by the id prefix rule.

    The id equals the task id or continues it after a non-alphanumeric separator, so task
    ``abc`` never claims worker ``abcd/1-ff``. An empty task id claims nothing.
    """
    if not task_id or not worker_id.startswith(task_id):
        return False
    rest = worker_id[len(task_id) :]
    return rest == "" or not rest[0].isalnum()


def stopped_task_event(
    task_arn: str, *, stop_code: str = "EssentialContainerExited"
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
def _handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    detail = event.get("detail") if isinstance(event, dict) else None
    if not isinstance(detail, dict) or event.get("detail-type") != DETAIL_TYPE:
        logger.info("event ignored", reason="not an ECS task state change")
        return {"ignored": "not an ECS task state change"}
    if detail.get("lastStatus") != STOPPED:
        return {"ignored": "task not stopped"}
    task_arn = detail.get("taskArn")
    if not isinstance(task_arn, str) or not task_id_of(task_arn):
        logger.warning("event ignored", reason="no task ARN")
        return {"ignored": "no task ARN"}
    stop_code = str(detail.get("stopCode") or "unknown")[:64]
    return reap(task_arn, task_id_of(task_arn), stop_code)


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Release the leases of a stopped ECS task's workers; returns what was done."""
    result: dict[str, Any] = _handle(event, context or runtime.LocalContext())
    return result


def reap(task_arn: str, task_id: str, stop_code: str) -> dict[str, Any]:
    """Release every lease held by a worker of the stopped task and hand the streams off.

    Raises :class:`StoreError` after trying every lease if some could not be released, so the
    event is delivered again (only the remaining ones will be found then).
    """
    rt = runtime.current()
    worker_ids = _workers_of_task(rt.dynamodb, rt.settings.table_name, task_arn, task_id)
    held = _leases_of(rt.dynamodb, rt.settings.table_name, worker_ids, task_id)
    # A task held up to its capacity of streams; each is a read, a write and a send, so they go
    # in parallel (boto3 clients are thread-safe) to hand the streams off within a second.
    with ThreadPoolExecutor(max_workers=_PARALLEL_RELEASES) as pool:
        outcomes = list(pool.map(lambda lease: _reap_lease(rt, lease, stop_code), held))
    released = sum(o in _RELEASED for o in outcomes)
    handoffs = outcomes.count(_Outcome.HANDED_OFF)
    failures = outcomes.count(_Outcome.FAILED)
    send_failures = outcomes.count(_Outcome.SEND_FAILED)
    metrics.emit({ReaperMetric.LEASES_RELEASED: released})
    if send_failures:
        metrics.emit({ApiMetric.COMMAND_SEND_FAILURES: send_failures})
    owners = sorted(worker_ids | {str(lease.owner) for lease in held})
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
    for worker_id in sorted(worker_ids):
        rt.leases.remove_worker(worker_id)  # the task is gone: its items would only linger
    return {"task_id": task_id, "workers": owners, "released": released, "handoffs": handoffs}


class _Outcome(enum.Enum):
    NOTHING = "nothing to release"
    FAILED = "release failed"
    RELEASED = "released"
    HANDED_OFF = "released and handed off"
    SEND_FAILED = "released, handoff not sent"


_RELEASED: Final = frozenset({_Outcome.RELEASED, _Outcome.HANDED_OFF, _Outcome.SEND_FAILED})


def _reap_lease(rt: runtime.Runtime, lease: LeaseView, stop_code: str) -> _Outcome:
    """Release one lease of the dead task and, for a STARTED stream, send its handoff."""
    try:
        stream = _release(rt, lease, stop_code)
    except StoreError as exc:
        logger.warning("release failed", stream_id=lease.stream_id, error=str(exc))
        return _Outcome.FAILED
    if stream is None:
        return _Outcome.NOTHING
    if stream.desired_state is not DesiredState.STARTED:
        return _Outcome.RELEASED
    sent = send_command(
        rt.sqs,
        rt.settings.queue_url,
        handoff_command(lease.stream_id, stream.generation),
        logger=logger,
    )
    return _Outcome.HANDED_OFF if sent else _Outcome.SEND_FAILED


def _release(rt: runtime.Runtime, lease: LeaseView, stop_code: str) -> Stream | None:
    """Release one lease if it is still the dead worker's; the stream as it was, or None."""
    assert lease.owner is not None
    stream = rt.leases.read(lease.stream_id, consistent=True)
    if stream is None or stream.owner != lease.owner or stream.epoch != lease.epoch:
        return None  # released, taken over or deleted since the index was read
    message = f"worker {lease.owner} stopped holding the lease (ECS {stop_code})"
    try:
        done = rt.leases.release(
            lease.stream_id, lease.owner, lease.epoch, last_error=message[:_MAX_ERROR_CHARS]
        )
    except LeaseLost:
        return None
    if done:
        logger.info("lease released", stream_id=lease.stream_id, epoch=lease.epoch)
    return stream if done else None


def _workers_of_task(client: Any, table: str, task_arn: str, task_id: str) -> set[str]:
    """Ids of worker items that belong to the task, by id prefix or by their ``task_arn``."""
    all_ids = [
        worker_id_of(str(item[PK]))
        for item in dynamo.items(
            client,
            "query",
            TableName=table,
            IndexName=BY_KIND.name,
            KeyConditionExpression="#k = :kind",
            ExpressionAttributeNames={"#k": WorkerAttr.KIND},
            ExpressionAttributeValues=dynamo.serialize({":kind": WORKER_KIND}),
        )
    ]
    matched = {w for w in all_ids if belongs_to_task(w, task_id)}
    unmatched = [{PK: worker_key(w)} for w in all_ids if w not in matched]
    projection = [WorkerAttr.WORKER_ID, WorkerAttr.TASK_ARN]
    for item in dynamo.batch_get(client, table, unmatched, projection):
        if item.get(WorkerAttr.TASK_ARN) == task_arn and item.get(WorkerAttr.WORKER_ID):
            matched.add(str(item[WorkerAttr.WORKER_ID]))
    return matched


def _leases_of(client: Any, table: str, worker_ids: set[str], task_id: str) -> list[LeaseView]:
    """Leases in the ``by-owner`` index whose owner is one of the task's workers."""
    found = []
    for item in dynamo.items(client, "scan", TableName=table, IndexName=BY_OWNER.name):
        owner = item.get(StreamAttr.LEASE_OWNER)
        if isinstance(owner, str) and (owner in worker_ids or belongs_to_task(owner, task_id)):
            found.append(LeaseView.from_item(item))
    return sorted(found, key=lambda lease: lease.stream_id)
