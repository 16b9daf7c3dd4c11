"""The auditor Lambda (every minute): how many streams are wanted, owned and orphaned.

Publishes ``StartedStreams``, ``OwnedStreams``, ``OrphanedStreams``, ``OldestOrphanAgeSeconds``,
``LiveWorkers``, the owned streams per connection state (``ConnectingStreams``,
``ConnectedStreams``, ``RetryingStreams``, ``RejectedStreams``, ``StalledStreams``,
``MalformedStreams``, ``SinkFailingStreams``) and in any trouble state (``TroubleStreams``) as
EMF metrics, zeros included, so alarms and scaling see the truth even when every worker is
dead. Cheap by construction: one query of the fleet index and one of the STARTED partition of
``by-state-expiry`` reading three small projected attributes (owner, expiry, connection
state); no scan, no stream payloads.

Definitions at wall time ``now``: a STARTED stream is *orphaned* when it has no owner, when its
per-stream lease has lapsed (``0 < lease_expires_at_ms < now``), or when it is attached to a
session that is not live (tombstoned, gone, or past its expiry: its holder has fenced itself);
every other STARTED stream is *owned*. An orphan's age counts from its lease's or its session's
expiry, or from ``updated_at`` (creation, start or release) when it had none.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas import runtime
from lambdas.metrics import MetricEmitter
from lambdas.tracing import tracer
from streamlease import dynamo
from streamlease.lease_store import wall_ms
from streamlease.schema import (
    BY_STATE_EXPIRY,
    PK,
    SESSION_HELD_MS,
    TROUBLE_STATES,
    ConnectionState,
    DesiredState,
    StreamAttr,
)
from streamlease.telemetry import AUDITOR_SERVICE, AuditorMetric

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import QueryInputTypeDef

logger = Logger(service=AUDITOR_SERVICE, level=runtime.current().settings.log_level)
metrics = MetricEmitter(AUDITOR_SERVICE)

ZERO_EXPIRY_SAMPLE: Final = 100
"""Most never-leased/released orphans whose ``updated_at`` is read to age them."""


@dataclass(frozen=True)
class Audit:
    """One audit's numbers; ages in seconds."""

    started_streams: int
    owned_streams: int
    orphaned_streams: int
    oldest_orphan_age_seconds: float
    live_workers: int
    connecting_streams: int = 0
    connected_streams: int = 0
    retrying_streams: int = 0
    rejected_streams: int = 0
    stalled_streams: int = 0
    malformed_streams: int = 0
    sink_failing_streams: int = 0
    trouble_streams: int = 0
    """Owned streams in any of ``TROUBLE_STATES``."""

    def metrics(self) -> dict[str, float]:
        """The numbers under their metric names."""
        return {
            AuditorMetric.STARTED_STREAMS: self.started_streams,
            AuditorMetric.OWNED_STREAMS: self.owned_streams,
            AuditorMetric.ORPHANED_STREAMS: self.orphaned_streams,
            AuditorMetric.OLDEST_ORPHAN_AGE_SECONDS: self.oldest_orphan_age_seconds,
            AuditorMetric.LIVE_WORKERS: self.live_workers,
            AuditorMetric.CONNECTING_STREAMS: self.connecting_streams,
            AuditorMetric.CONNECTED_STREAMS: self.connected_streams,
            AuditorMetric.RETRYING_STREAMS: self.retrying_streams,
            AuditorMetric.REJECTED_STREAMS: self.rejected_streams,
            AuditorMetric.STALLED_STREAMS: self.stalled_streams,
            AuditorMetric.MALFORMED_STREAMS: self.malformed_streams,
            AuditorMetric.SINK_FAILING_STREAMS: self.sink_failing_streams,
            AuditorMetric.TROUBLE_STREAMS: self.trouble_streams,
        }


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@tracer.capture_lambda_handler
def _handle(event: Any, context: LambdaContext) -> dict[str, Any]:
    audit = run_audit(runtime.current(), wall_ms())
    metrics.emit(audit.metrics(), units={AuditorMetric.OLDEST_ORPHAN_AGE_SECONDS: "Seconds"})
    logger.info("audit", **asdict(audit))
    return asdict(audit)


def handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    """Audit the table and publish the metrics; returns the numbers (for logs and callers)."""
    result: dict[str, Any] = _handle(event, context)
    return result


def run_audit(rt: runtime.Runtime, now_ms: int) -> Audit:
    """Count wanted, owned and orphaned streams, connection states and live workers at
    ``now_ms``.

    Raises :class:`streamlease.errors.StoreError` when the table does not answer.
    """
    client, table = rt.dynamodb, rt.settings.table_name
    fleet = {w.worker_id: w for w in rt.sessions.list_fleet()}
    live = {sid for sid, w in fleet.items() if w.is_live and w.expires_at_ms >= now_ms}
    started = orphaned = free_or_lapsed = 0
    states: Counter[str] = Counter()
    oldest = 0
    for item in _started_leases(client, table):
        started += 1
        owner = item.get(StreamAttr.LEASE_OWNER)
        expires = int(item.get(StreamAttr.LEASE_EXPIRES_AT_MS, 0))
        if expires == SESSION_HELD_MS and owner not in live:
            orphaned += 1
            session = fleet.get(str(owner))
            if session is not None:  # its renewals stopped counting at its expiry
                oldest = max(oldest, now_ms - session.expires_at_ms)
        elif expires < now_ms:
            orphaned += 1
            free_or_lapsed += 1
        else:
            states[str(item.get(StreamAttr.CONNECTION_STATE, ""))] += 1
    if free_or_lapsed:
        oldest = max(oldest, _oldest_orphan_age_ms(client, table, now_ms))
    return Audit(
        started_streams=started,
        owned_streams=started - orphaned,
        orphaned_streams=orphaned,
        oldest_orphan_age_seconds=round(max(0, oldest) / 1000, 3),
        live_workers=len(live),
        connecting_streams=states[ConnectionState.CONNECTING],
        connected_streams=states[ConnectionState.CONNECTED],
        retrying_streams=states[ConnectionState.RETRYING],
        rejected_streams=states[ConnectionState.REJECTED],
        stalled_streams=states[ConnectionState.STALLED],
        malformed_streams=states[ConnectionState.MALFORMED],
        sink_failing_streams=states[ConnectionState.SINK_FAILING],
        trouble_streams=sum(states[state] for state in TROUBLE_STATES),
    )


def _started_leases(client: DynamoDBClient, table: str) -> Iterator[dict[str, Any]]:
    """Owner, expiry and connection state of every STARTED stream (projected index items)."""
    request = _started_query(
        table,
        "#e >= :zero",
        {":zero": 0},
        {"#o": StreamAttr.LEASE_OWNER, "#c": StreamAttr.CONNECTION_STATE},
    )
    request["ProjectionExpression"] = "#o, #e, #c"
    return dynamo.items(client.query, request)


def _started_query(
    table: str,
    expiry_condition: str,
    values: dict[str, Any],
    names: Mapping[str, str] | None = None,
) -> QueryInputTypeDef:
    return {
        "TableName": table,
        "IndexName": BY_STATE_EXPIRY.name,
        "KeyConditionExpression": f"#s = :started AND {expiry_condition}",
        "ExpressionAttributeNames": {
            "#s": StreamAttr.DESIRED_STATE,
            "#e": StreamAttr.LEASE_EXPIRES_AT_MS,
            **(names or {}),
        },
        "ExpressionAttributeValues": dynamo.serialize(
            {":started": DesiredState.STARTED.value, **values}
        ),
    }


def _oldest_orphan_age_ms(client: DynamoDBClient, table: str, now_ms: int) -> int:
    """Age of the oldest orphan: the earliest lapsed lease, or the oldest lease-less stream."""
    oldest = 0
    request = _started_query(
        table, "#e BETWEEN :one AND :before", {":one": 1, ":before": now_ms - 1}
    )
    request["Limit"] = 1
    lapsed = dynamo.call(client.query, **request).get("Items", [])
    if lapsed:
        expires = int(dynamo.plain(lapsed[0])[StreamAttr.LEASE_EXPIRES_AT_MS])
        oldest = now_ms - expires
    request = _started_query(table, "#e = :zero", {":zero": 0}, {"#pk": PK})
    request["ProjectionExpression"] = "#pk"
    request["Limit"] = ZERO_EXPIRY_SAMPLE
    never = dynamo.call(client.query, **request).get("Items", [])
    keys = [{PK: dynamo.plain(item)[PK]} for item in never]
    for item in dynamo.batch_get(client, table, keys, [PK, StreamAttr.UPDATED_AT]):
        since = _epoch_ms(item.get(StreamAttr.UPDATED_AT))
        if since is not None:
            oldest = max(oldest, now_ms - since)
    return max(0, oldest)


def _epoch_ms(iso: Any) -> int | None:
    """Milliseconds since the epoch of an ISO-8601 timestamp; None if it does not parse."""
    if not isinstance(iso, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)
