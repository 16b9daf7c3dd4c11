"""Counts the Lambdas publish: CloudWatch EMF documents on stdout, one per call.

Each :meth:`MetricEmitter.emit` builds its own Powertools ``EphemeralMetrics`` (no metric set
shared with another instance or thread: the local stack runs the handlers in threads) and
flushes it at once, under the namespace of the current :mod:`lambdas.runtime` settings and a
``service`` dimension naming the function. Nothing is kept between invocations, so there is no
``log_metrics`` decorator to forget and no cold-start metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from lambdas import runtime


@dataclass(frozen=True)
class MetricEmitter:
    """Publishes metrics under one service name (the ``service`` dimension)."""

    service: str

    def emit(self, values: Mapping[str, float], units: Mapping[str, str] | None = None) -> None:
        """Publish ``values`` (metric name → value) in one EMF document now.

        ``units`` maps a metric name to its CloudWatch unit; the default is ``Count``.
        """
        metrics = EphemeralMetrics(
            namespace=runtime.current().settings.metrics_namespace, service=self.service
        )
        for name, value in values.items():
            unit = (units or {}).get(name, MetricUnit.Count.value)
            metrics.add_metric(name=name, unit=unit, value=value)
        metrics.flush_metrics()
