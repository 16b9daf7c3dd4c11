"""The auditor Lambda (every minute): how many streams are wanted, owned and orphaned.

Publishes ``StartedStreams``, ``OwnedStreams``, ``OrphanedStreams``, ``OldestOrphanAgeSeconds``,
``LiveWorkers``, the owned streams per connection state (``ConnectingStreams``,
``ConnectedStreams``, ``RetryingStreams``, ``RejectedStreams``, ``StalledStreams``,
``MalformedStreams``, ``SinkFailingStreams``) and in any trouble state (``TroubleStreams``) as
EMF metrics, zeros included, so alarms and scaling see the truth even when every worker is
dead. It reads small projections spread over many partitions, never one hot partition and never
stream payloads: the fleet index; ``by-holder`` (owner, slot, desired state and connection
state of every held stream; its partitions are the owners); and the orphan index
``by-shard-expiry`` (the STARTED streams no session holds: free ones and per-stream leases).

Definitions at wall time ``now``: a STARTED stream is *orphaned* when it has no owner, when its
per-stream lease has lapsed (``0 < lease_expires_at_ms < now``), or when it is attached to a
session that is not live (tombstoned, gone, or past its expiry: its holder has fenced itself);
every other STARTED stream is *owned*. An orphan's age counts from its lease's or its session's
expiry, or from ``updated_at`` when there is none: a stream never leased or released (creation,
start or release), or one whose session item is gone (the last write of its holder, which died
after it: an upper bound).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas import runtime
from lambdas.metrics import MetricEmitter
from lambdas.tracing import tracer
from streamlease import dynamo
from streamlease.indexes import BY_OWNER, BY_SHARD_EXPIRY
from streamlease.lease_store import wall_ms
from streamlease.schema import PK, TROUBLE_STATES, ConnectionState, DesiredState, StreamAttr
from streamlease.telemetry import AUDITOR_SERVICE, AuditorMetric

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

logger = Logger(service=AUDITOR_SERVICE, level=runtime.current().settings.log_level)
metrics = MetricEmitter(AUDITOR_SERVICE)

A = StreamAttr
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
    started = orphaned = 0
    oldest = 0
    # Free streams and per-stream leases first: a per-stream lease is owned while it runs.
    free: list[str] = []
    of_gone_sessions: list[str] = []
    running: set[str] = set()
    for item in _scan(client, table, BY_SHARD_EXPIRY.name):
        started += 1
        expires = int(item.get(A.LEASE_EXPIRES_AT_MS, 0))
        if expires >= now_ms:
            running.add(str(item[PK]))  # counted by its connection state below
            continue
        orphaned += 1
        if expires > 0:
            oldest = max(oldest, now_ms - expires)
        elif len(free) < ZERO_EXPIRY_SAMPLE:
            free.append(str(item[PK]))
    states: Counter[str] = Counter()
    for item in _scan(client, table, BY_OWNER.name):
        if item.get(A.DESIRED_STATE) != DesiredState.STARTED:
            continue
        if item.get(A.LEASE_SLOT) is None:  # a per-stream lease: counted above
            if str(item[PK]) in running:
                states[str(item.get(A.CONNECTION_STATE, ""))] += 1
            continue
        started += 1
        owner = str(item.get(A.LEASE_OWNER))
        if owner in live:
            states[str(item.get(A.CONNECTION_STATE, ""))] += 1
            continue
        orphaned += 1
        session = fleet.get(owner)
        if session is not None:  # its renewals stopped counting at its expiry
            oldest = max(oldest, now_ms - session.expires_at_ms)
        elif len(of_gone_sessions) < ZERO_EXPIRY_SAMPLE:  # aged from its holder's last write
            of_gone_sessions.append(str(item[PK]))
    if keys := free + of_gone_sessions:
        oldest = max(oldest, _oldest_update_age_ms(client, table, keys, now_ms))
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


def _scan(client: DynamoDBClient, table: str, index: str) -> Iterator[dict[str, Any]]:
    """Every entry of ``index`` (its keys and projection)."""
    return dynamo.items(client.scan, {"TableName": table, "IndexName": index})


def _oldest_update_age_ms(client: DynamoDBClient, table: str, keys: list[str], now_ms: int) -> int:
    """How long ago the least recently written of the streams ``keys`` was written, from
    ``updated_at`` (a free stream's creation, start or release; a gone session's stream's last
    write by its holder), in ms (0: none says)."""
    oldest = 0
    for item in dynamo.batch_get(client, table, [{PK: k} for k in keys], [PK, A.UPDATED_AT]):
        since = _epoch_ms(item.get(A.UPDATED_AT))
        if since is not None:
            oldest = max(oldest, now_ms - since)
    return oldest


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
