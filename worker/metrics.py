"""Worker metrics: cheap in-memory counters, flushed as CloudWatch EMF on a fixed interval.

Counting happens on the hot path (every message), so it is a dict increment; Powertools Metrics
is touched only at flush time. Every flush emits every metric, zeros included, so dashboards and
alarms see "nothing happened" rather than "no data". Latency metrics (``RenewalLagMs``,
``EventLoopLagMs``, ``RenewalAnswerAgeMs``) keep every sample of the interval: the flush emits up to
:data:`MAX_EMF_VALUES` of them (evenly sampled, so CloudWatch percentiles stay meaningful) and
logs the exact p50/p99/max.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from streamlease.stats import percentile
from streamlease.telemetry import WORKER_SERVICE, WorkerMetric
from worker.logs import logger

MAX_EMF_VALUES: Final = 99
"""CloudWatch accepts 100 values per metric in one EMF document; Powertools flushes a document
early when a metric reaches 100, so one fewer keeps every flush in one document."""

COUNTERS: Final = (
    WorkerMetric.LEASES_ACQUIRED,
    WorkerMetric.LEASES_LOST,
    WorkerMetric.TAKEOVERS,
    WorkerMetric.HANDOFFS,
    WorkerMetric.MESSAGES_RECEIVED,
    WorkerMetric.SINK_ERRORS,
    WorkerMetric.RECONNECTS,
    WorkerMetric.SEQ_GAPS,
    WorkerMetric.MALFORMED_FRAMES,
    WorkerMetric.STREAMS_ENDED,
    WorkerMetric.SESSIONS_EXPIRED,
    WorkerMetric.SESSIONS_REVOKED,
    WorkerMetric.CHECKPOINT_SLOTS_LOST,
    WorkerMetric.SESSION_ROLLOVERS,
)
RENEWAL_CALL_MS: Final = "RenewalCallMs"
"""Round trip of each renewal write as the worker sees it (DynamoDB plus the thread pool).
Logged with every flush, not emitted: CloudWatch has DynamoDB's own latency metrics."""
EMITTED_LATENCIES: Final = (
    WorkerMetric.RENEWAL_LAG_MS,
    WorkerMetric.EVENT_LOOP_LAG_MS,
    WorkerMetric.RENEWAL_ANSWER_AGE_MS,
)
LATENCIES: Final = (*EMITTED_LATENCIES, RENEWAL_CALL_MS)


@dataclass(frozen=True)
class LatencySummary:
    """One latency metric over a flush interval (milliseconds)."""

    count: int
    p50: float
    p99: float
    max: float
    emitted: tuple[float, ...]
    """At most :data:`MAX_EMF_VALUES` samples, evenly picked from the sorted samples."""


@dataclass(frozen=True)
class Snapshot:
    """Everything counted since the previous flush."""

    counters: dict[str, int]
    active_connections: int
    latencies: dict[str, LatencySummary] = field(default_factory=dict)


def summarize(samples: Sequence[float]) -> LatencySummary:
    """p50/p99 (:func:`streamlease.stats.percentile`: linear interpolation)/max of ``samples``
    and an even pick of at most :data:`MAX_EMF_VALUES` of them."""
    ordered = sorted(samples)
    if not ordered:
        return LatencySummary(0, 0.0, 0.0, 0.0, (0.0,))
    if len(ordered) <= MAX_EMF_VALUES:
        picked = tuple(ordered)
    else:
        step = len(ordered) / MAX_EMF_VALUES
        picked = (*(ordered[int(i * step)] for i in range(MAX_EMF_VALUES - 1)), ordered[-1])
    return LatencySummary(
        count=len(ordered),
        p50=percentile(ordered, 50),
        p99=percentile(ordered, 99),
        max=ordered[-1],
        emitted=picked,
    )


class WorkerMetrics:
    """Counters and latency samples of one worker process (event-loop thread only)."""

    def __init__(self, active_connections: Callable[[], int] = lambda: 0) -> None:
        """``active_connections``: reads the gauge at flush time (streams held right now)."""
        self._active = active_connections
        self._counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._samples: dict[str, list[float]] = {name: [] for name in LATENCIES}
        self._totals: dict[str, int] = dict.fromkeys(COUNTERS, 0)

    def bind_gauge(self, active_connections: Callable[[], int]) -> None:
        """Set the callable that reads ActiveConnections."""
        self._active = active_connections

    def incr(self, name: str, count: int = 1) -> None:
        """Add ``count`` to counter ``name`` (one of :data:`COUNTERS`)."""
        self._counts[name] += count
        self._totals[name] += count

    def observe(self, name: str, value_ms: float) -> None:
        """Record one latency sample of ``name`` (one of :data:`LATENCIES`), in milliseconds."""
        self._samples[name].append(value_ms)

    def total(self, name: str) -> int:
        """Counter ``name`` since the process started (never reset; for logs and tests)."""
        return self._totals[name]

    def take_snapshot(self) -> Snapshot:
        """Everything since the last snapshot; resets the interval counters and samples."""
        counts, self._counts = self._counts, dict.fromkeys(COUNTERS, 0)
        samples, self._samples = self._samples, {name: [] for name in LATENCIES}
        return Snapshot(
            counters=counts,
            active_connections=self._active(),
            latencies={name: summarize(values) for name, values in samples.items()},
        )


class EmfPublisher:
    """Writes snapshots as CloudWatch embedded-metric-format documents on stdout."""

    def __init__(self, namespace: str) -> None:
        """``namespace``: the CloudWatch namespace (``Settings.metrics_namespace``)."""
        self._metrics = Metrics(namespace=namespace, service=WORKER_SERVICE)

    def publish(self, snapshot: Snapshot) -> None:
        """Emit one EMF document with every metric (zeros included) and flush stdout."""
        add = self._metrics.add_metric
        for name, count in snapshot.counters.items():
            add(name=name, unit=MetricUnit.Count, value=count)
        add(
            name=WorkerMetric.ACTIVE_CONNECTIONS,
            unit=MetricUnit.Count,
            value=snapshot.active_connections,
        )
        for name in EMITTED_LATENCIES:
            for value in snapshot.latencies[name].emitted:
                add(name=name, unit=MetricUnit.Milliseconds, value=value)
        self._metrics.flush_metrics()
        sys.stdout.flush()


def flush(metrics: WorkerMetrics, publisher: EmfPublisher) -> Snapshot:
    """Publish everything since the last flush, and log a one-line summary of it."""
    snapshot = metrics.take_snapshot()
    publisher.publish(snapshot)
    lag = snapshot.latencies[WorkerMetric.RENEWAL_LAG_MS]
    loop_lag = snapshot.latencies[WorkerMetric.EVENT_LOOP_LAG_MS]
    call = snapshot.latencies[RENEWAL_CALL_MS]
    answer_age = snapshot.latencies[WorkerMetric.RENEWAL_ANSWER_AGE_MS]
    logger.info(
        "metrics flushed",
        active_connections=snapshot.active_connections,
        counters=snapshot.counters,
        renewals=lag.count,
        renewal_lag_ms_p50=round(lag.p50, 2),
        renewal_lag_ms_p99=round(lag.p99, 2),
        renewal_lag_ms_max=round(lag.max, 2),
        loop_lag_ms_max=round(loop_lag.max, 2),
        renewal_call_ms_p50=round(call.p50, 2),
        renewal_call_ms_p99=round(call.p99, 2),
        renewal_answer_age_ms_max=round(answer_age.max, 2),
    )
    return snapshot


async def flush_periodically(
    metrics: WorkerMetrics, publisher: EmfPublisher, interval_seconds: float
) -> None:
    """Flush every ``interval_seconds`` until cancelled (the final flush is the caller's)."""
    while True:
        await asyncio.sleep(interval_seconds)
        flush(metrics, publisher)
