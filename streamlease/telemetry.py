"""Metric names and dimensions shared by the worker, the Lambdas and the CDK dashboard/alarms.

Powertools Metrics adds a ``service`` dimension to every metric; alarms and scaling policies must
use the same dimension or they never see data. No stream id is ever a dimension.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from streamlease.schema import ConnectionState

NAMESPACE_DEFAULT: Final = "Streamlease"
SERVICE_DIMENSION: Final = "service"
WORKER_SERVICE: Final = "streamlease-worker"
API_SERVICE: Final = "streamlease-api"
REAPER_SERVICE: Final = "streamlease-reaper"
AUDITOR_SERVICE: Final = "streamlease-auditor"
CONSUMER_SERVICE: Final = "streamlease-consumer"


class WorkerMetric:
    """Emitted by every worker (EMF on stdout), flushed every ``metrics_flush_seconds``."""

    ACTIVE_CONNECTIONS: Final = "ActiveConnections"
    LEASES_ACQUIRED: Final = "LeasesAcquired"
    LEASES_LOST: Final = "LeasesLost"
    TAKEOVERS: Final = "Takeovers"
    HANDOFFS: Final = "Handoffs"
    MESSAGES_RECEIVED: Final = "MessagesReceived"
    SINK_ERRORS: Final = "SinkErrors"
    RECONNECTS: Final = "Reconnects"
    RENEWAL_LAG_MS: Final = "RenewalLagMs"
    EVENT_LOOP_LAG_MS: Final = "EventLoopLagMs"
    RENEWAL_ANSWER_AGE_MS: Final = "RenewalAnswerAgeMs"
    """Sampled every second: how long ago the last session renewal that was answered was sent
    (any session of the worker). Up to a heartbeat when healthy; it climbs through a gray
    failure, when renewals go out on time (``RenewalLagMs`` stays low) but no answer returns."""
    SEQ_GAPS: Final = "SeqGaps"
    MALFORMED_FRAMES: Final = "MalformedFrames"
    STREAMS_ENDED: Final = "StreamsEnded"
    """Streams whose upstream finished them (close code 1000): released and set STOPPED."""
    SESSIONS_EXPIRED: Final = "SessionsExpired"
    """Peer sessions this worker proved dead and tombstoned (then took their streams over)."""
    SESSIONS_REVOKED: Final = "SessionsRevoked"
    """Own sessions this worker gave up because none of their renewals was answered for a
    lease while the store still answered it (a gray failure): their streams went to peers."""
    CHECKPOINT_SLOTS_LOST: Final = "CheckpointSlotsLost"
    """Checkpoint slots taken out of use because an acquire or release got no answer (each is
    recovered once a read shows its stream item no longer names it)."""
    SESSION_ROLLOVERS: Final = "SessionRollovers"
    """Sessions this worker replaced by a fresh one because too many slots stayed lost."""


class AuditorMetric:
    """Emitted by the auditor every minute; visible even when every worker is dead."""

    STARTED_STREAMS: Final = "StartedStreams"
    OWNED_STREAMS: Final = "OwnedStreams"
    ORPHANED_STREAMS: Final = "OrphanedStreams"
    OLDEST_ORPHAN_AGE_SECONDS: Final = "OldestOrphanAgeSeconds"
    LIVE_WORKERS: Final = "LiveWorkers"
    CONNECTING_STREAMS: Final = "ConnectingStreams"
    CONNECTED_STREAMS: Final = "ConnectedStreams"
    RETRYING_STREAMS: Final = "RetryingStreams"
    REJECTED_STREAMS: Final = "RejectedStreams"
    """Owned but refused by their upstream: nothing flows."""
    STALLED_STREAMS: Final = "StalledStreams"
    """Connected, but no frame for their idle threshold: the feed went quiet."""
    MALFORMED_STREAMS: Final = "MalformedStreams"
    """Frames arrive, none can be delivered (e.g. no seq where the profile says)."""
    SINK_FAILING_STREAMS: Final = "SinkFailingStreams"
    """Frames arrive, the sink keeps refusing them."""
    TROUBLE_STREAMS: Final = "TroubleStreams"
    """Owned streams in any trouble state (``schema.TROUBLE_STATES``, retrying included):
    the count ``streamlease watch`` heads its view with."""


STREAMS_BY_CONNECTION_STATE: Final = {
    ConnectionState.CONNECTING: AuditorMetric.CONNECTING_STREAMS,
    ConnectionState.CONNECTED: AuditorMetric.CONNECTED_STREAMS,
    ConnectionState.RETRYING: AuditorMetric.RETRYING_STREAMS,
    ConnectionState.REJECTED: AuditorMetric.REJECTED_STREAMS,
    ConnectionState.STALLED: AuditorMetric.STALLED_STREAMS,
    ConnectionState.MALFORMED: AuditorMetric.MALFORMED_STREAMS,
    ConnectionState.SINK_FAILING: AuditorMetric.SINK_FAILING_STREAMS,
}
"""The auditor's count of owned streams in each connection state (an owned stream is never
``ended``: that one is released and STOPPED)."""


class ApiMetric:
    """Emitted by the API handler."""

    COMMAND_SEND_FAILURES: Final = "CommandSendFailures"
    STREAMS_CREATED: Final = "StreamsCreated"


class ReaperMetric:
    """Emitted by the reaper."""

    LEASES_RELEASED: Final = "LeasesReleased"
    UNPLANNED_TASK_STOPS: Final = "UnplannedTaskStops"
    """Worker tasks that stopped outside a deployment or scale-in (crashed, failed to start,
    failed their health check): 1 per such stop, 0 per planned one. Repeated, a crash loop."""


# --- traces ------------------------------------------------------------------------------------

TRACE_HTTP_HEADER: Final = "X-Amzn-Trace-Id"
"""The X-Ray trace header of an HTTP request (API Gateway passes it to the API function)."""
TRACE_MESSAGE_ATTRIBUTE: Final = "AWSTraceHeader"
"""The SQS message system attribute that carries the X-Ray trace header of whoever sent a
command (the API, the reaper), so the worker's acquire joins that trace."""


class TraceExport(StrEnum):
    """Where a worker's spans go."""

    OFF = "off"
    """No spans: OpenTelemetry is not even imported."""
    OTLP = "otlp"
    """OTLP over HTTP to ``trace_otlp_endpoint`` (on AWS the collector beside the worker)."""
    FILE = "file"
    """One JSON object per span, appended to ``trace_file`` (local runs and tests)."""


class SpanName:
    """Spans of a stream's start in the worker, in the trace of the call that asked for it."""

    ACQUIRE: Final = "stream.acquire"
    """The conditional write that takes the stream (outcome: won, owned, stopped, ...)."""
    CONNECT: Final = "stream.connect"
    """Opening the upstream connection (TCP, TLS, WebSocket handshake)."""
    FIRST_BATCH: Final = "stream.first_batch"
    """From the acquire to the first batch the sink acknowledged: how long the stream took to
    start delivering."""
