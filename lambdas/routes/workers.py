"""``GET /workers``: the live fleet, from the worker items (architecture §3)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router

from lambdas import runtime
from lambdas.api_models import ErrorBody, WorkerList, WorkerView
from streamlease.lease_store import wall_ms

router = Router()


@router.get(
    "/workers",
    summary="List live workers",
    description=(
        "Every worker whose session is live and has not expired: id, host, pid, ECS task, "
        "state, liveness mode, streams held, capacity and heartbeat age."
    ),
    operation_id="listWorkers",
    tags=["workers"],
    responses={
        200: {
            "description": "The live fleet",
            "content": {content_types.APPLICATION_JSON: {"model": WorkerList}},
        },
        503: {
            "description": "Service Unavailable",
            "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}},
        },
    },
)
def list_workers() -> Response[Any]:
    """The live workers, sorted by id."""
    now = wall_ms()
    workers = [
        w for w in runtime.current().sessions.list_fleet() if w.is_live and w.expires_at_ms > now
    ]
    body = WorkerList(
        workers=[WorkerView.of(w, now) for w in sorted(workers, key=lambda w: w.worker_id)]
    )
    return Response(
        status_code=200, content_type=content_types.APPLICATION_JSON, body=body.model_dump_json()
    )
