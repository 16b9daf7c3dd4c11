"""What the fleet dashboard shows, as data: rows of graphs, each a list of metric series.

:mod:`cdk.components.fleet_dashboard` renders these into the CloudWatch dashboard. This module
imports no CDK, so anything that draws the same dashboard elsewhere (the local stack's page, from
the EMF metrics of the workers and Lambdas: :data:`EMF_SOURCES`) reads the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from streamlease.schema import TROUBLE_STATES
from streamlease.telemetry import (
    STREAMS_BY_CONNECTION_STATE,
    AuditorMetric,
    ReaperMetric,
    WorkerMetric,
)


class Source(StrEnum):
    """Where a series comes from (the renderer knows each one's namespace and dimensions)."""

    AUDITOR = "auditor"
    """Namespace of the deployment, ``service`` = the auditor (every minute)."""
    WORKER = "worker"
    """Namespace of the deployment, ``service`` = the worker, summed over every task."""
    REAPER = "reaper"
    """Namespace of the deployment, ``service`` = the reaper (once per stopped task)."""
    TASKS = "tasks"
    """``ECS/ContainerInsights`` of the worker service."""
    SERVICE = "service"
    """``AWS/ECS`` of the worker service (CPU and memory utilization, %)."""
    SINK = "sink"
    """``AWS/Kinesis`` of the sink stream."""
    API = "api"
    """``AWS/ApiGateway`` of the REST API."""
    FUNCTIONS = "functions"
    """``AWS/Lambda``: one line per control-plane function."""
    QUEUE = "queue"
    """``AWS/SQS`` of the command queue."""
    DEAD_LETTERS = "dead-letters"
    """``AWS/SQS`` of its dead-letter queue."""
    TABLE = "table"
    """``AWS/DynamoDB`` of the lease table (``ThrottledRequests``: summed over its operations)."""


EMF_SOURCES: Final = frozenset({Source.AUDITOR, Source.WORKER, Source.REAPER})
"""The sources streamlease itself publishes (EMF), so a local stack has them too."""


@dataclass(frozen=True)
class Series:
    """One line: a metric of a source, its statistic over one minute, and its label; with
    ``plus``, the sum of it and those metrics (same statistic, a missing value counted 0)."""

    source: Source
    metric: str
    statistic: str = "Sum"
    label: str | None = None
    plus: tuple[tuple[Source, str], ...] = ()
    """Further ``(source, metric)`` pairs added into this line: one thing counted in two
    places (a takeover by a worker, or by the reaper's crash fast path)."""

    @property
    def parts(self) -> tuple[tuple[Source, str], ...]:
        """Every ``(source, metric)`` this line adds up."""
        return ((self.source, self.metric), *self.plus)


@dataclass(frozen=True)
class Graph:
    """One graph widget."""

    title: str
    left: tuple[Series, ...]
    right: tuple[Series, ...] = ()
    per_second: bool = False
    """The left series are drawn as rates (sum per minute / 60)."""
    alarm: str | None = None
    """The alarm (by its name in ``FleetAlarms.by_name``) whose threshold is drawn across."""
    events: bool = False
    """Its series count rare events (a crash, a takeover): drawn as marks that stand out, not
    as lines along zero."""


def _auditor(name: str, statistic: str = "Maximum", label: str | None = None) -> Series:
    return Series(Source.AUDITOR, name, statistic, label)


def _worker(name: str, statistic: str = "Sum", label: str | None = None) -> Series:
    return Series(Source.WORKER, name, statistic, label)


TAKEOVERS: Final = Series(
    Source.WORKER,
    WorkerMetric.TAKEOVERS,
    label="takeovers",
    plus=((Source.REAPER, ReaperMetric.LEASES_RELEASED),),
)
"""Leases taken from a holder that did not release them, as each stream's ``takeovers``
counts them: by a worker (taken or freed from a dead session) or by the reaper (freed from a
stopped task's sessions, the crash fast path)."""
SESSIONS_LOST: Final = Series(
    Source.WORKER,
    WorkerMetric.SESSIONS_EXPIRED,
    label="sessions lost",
    plus=((Source.WORKER, WorkerMetric.SESSIONS_REVOKED),),
)
"""Sessions ended without a drain: expired by an observer, or revoked by their own worker."""


ROWS: Final[tuple[tuple[Graph, ...], ...]] = (
    (
        Graph(
            "Streams: wanted vs owned",
            (_auditor(AuditorMetric.STARTED_STREAMS), _auditor(AuditorMetric.OWNED_STREAMS)),
        ),
        Graph(
            "Orphaned streams and oldest orphan age (s)",
            (_auditor(AuditorMetric.ORPHANED_STREAMS),),
            right=(_auditor(AuditorMetric.OLDEST_ORPHAN_AGE_SECONDS),),
        ),
        Graph(
            "Fleet: running tasks and live workers",
            (
                Series(Source.TASKS, "RunningTaskCount", "Average", "running tasks"),
                _auditor(AuditorMetric.LIVE_WORKERS, "Minimum"),
            ),
            alarm="LiveWorkersLow",
        ),
    ),
    (
        Graph(
            "Streams in trouble, by state",
            tuple(_auditor(STREAMS_BY_CONNECTION_STATE[state]) for state in sorted(TROUBLE_STATES)),
        ),
        Graph(
            "Owned streams: connected, connecting, in trouble",
            (
                _auditor(AuditorMetric.CONNECTED_STREAMS),
                _auditor(AuditorMetric.CONNECTING_STREAMS),
                _auditor(AuditorMetric.TROUBLE_STREAMS),
            ),
        ),
        Graph(
            "Events: unplanned task stops, takeovers, sessions lost",
            (
                Series(Source.REAPER, ReaperMetric.UNPLANNED_TASK_STOPS, label="unplanned stops"),
                TAKEOVERS,
                SESSIONS_LOST,
            ),
            events=True,
        ),
    ),
    (
        Graph(
            "Active connections per task",
            tuple(
                _worker(WorkerMetric.ACTIVE_CONNECTIONS, stat, f"{stat.lower()} per task")
                for stat in ("Average", "Maximum", "Minimum")
            ),
        ),
        Graph(
            "Lease churn",
            (
                _worker(WorkerMetric.LEASES_ACQUIRED),
                TAKEOVERS,
                _worker(WorkerMetric.HANDOFFS),
                _worker(WorkerMetric.LEASES_LOST),
                _worker(WorkerMetric.SESSIONS_EXPIRED),
                _worker(WorkerMetric.STREAMS_ENDED),
                _worker(WorkerMetric.CHECKPOINT_SLOTS_LOST),
                _worker(WorkerMetric.SESSION_ROLLOVERS),
            ),
        ),
        Graph(
            "Renewal and event-loop lag (ms, left); renewal answer age (ms, right)",
            (
                _worker(WorkerMetric.RENEWAL_LAG_MS, "Maximum", "renewal lag max"),
                _worker(WorkerMetric.RENEWAL_LAG_MS, "p99", "renewal lag p99"),
                _worker(WorkerMetric.EVENT_LOOP_LAG_MS, "p99", "event-loop lag p99"),
            ),
            # A heartbeat apart at rest, climbing through a gray failure: seconds, which on
            # the lags' axis would flatten them.
            right=(_worker(WorkerMetric.RENEWAL_ANSWER_AGE_MS, "Maximum", "answer age max"),),
            alarm="RenewalLag",
        ),
    ),
    (
        Graph(
            "Worker CPU utilization (%)",
            tuple(
                Series(Source.SERVICE, "CPUUtilization", stat, f"CPU {stat.lower()}")
                for stat in ("Average", "Maximum")
            ),
        ),
        Graph(
            "Worker memory utilization (%)",
            tuple(
                Series(Source.SERVICE, "MemoryUtilization", stat, f"memory {stat.lower()}")
                for stat in ("Average", "Maximum")
            ),
        ),
        Graph(
            "Messages per second",
            (_worker(WorkerMetric.MESSAGES_RECEIVED, label="messages/s"),),
            per_second=True,
        ),
    ),
    (
        Graph(
            "Sink: write errors and throttled records",
            (
                _worker(WorkerMetric.SINK_ERRORS, label="sink write errors (workers)"),
                Series(
                    Source.SINK, "WriteProvisionedThroughputExceeded", label="throttled records"
                ),
            ),
        ),
        Graph(
            "Sink: records and bytes in",
            (Series(Source.SINK, "IncomingRecords", label="records"),),
            right=(Series(Source.SINK, "IncomingBytes", label="bytes"),),
        ),
        Graph(
            "Upstream reconnects, sequence gaps, malformed frames",
            (
                _worker(WorkerMetric.RECONNECTS),
                _worker(WorkerMetric.SEQ_GAPS),
                _worker(WorkerMetric.MALFORMED_FRAMES),
            ),
        ),
    ),
    (
        Graph(
            "Command queue: oldest message age (s) and dead letters",
            (Series(Source.QUEUE, "ApproximateAgeOfOldestMessage", "Maximum"),),
            right=(
                Series(
                    Source.DEAD_LETTERS,
                    "ApproximateNumberOfMessagesVisible",
                    "Maximum",
                    "dead letters",
                ),
            ),
        ),
        Graph(
            "API requests, 4xx and 5xx",
            (
                Series(Source.API, "Count", label="requests"),
                Series(Source.API, "4XXError", label="4xx"),
                Series(Source.API, "5XXError", label="5xx"),
            ),
        ),
        Graph(
            "API latency (ms)",
            tuple(
                Series(Source.API, "Latency", stat, f"latency {stat}") for stat in ("p50", "p99")
            ),
        ),
    ),
    (
        Graph("Control-plane function errors", (Series(Source.FUNCTIONS, "Errors"),)),
        Graph(
            "DynamoDB throttled requests and conditional-check failures",
            (Series(Source.TABLE, "ThrottledRequests", label="throttled"),),
            right=(
                Series(Source.TABLE, "ConditionalCheckFailedRequests", label="conditional-check"),
            ),
        ),
        Graph(
            "DynamoDB consumed capacity (units)",
            (
                Series(Source.TABLE, "ConsumedWriteCapacityUnits", label="write"),
                Series(Source.TABLE, "ConsumedReadCapacityUnits", label="read"),
            ),
        ),
    ),
)
"""The dashboard below its alarm-status row, top to bottom: demand, ownership and the fleet;
streams in trouble and crashes; per-task load, churn and lag; task CPU, memory and throughput;
the sink and the upstreams; the queue and the API; the functions and the table."""
