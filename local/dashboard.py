"""The local dashboard: the CloudWatch dashboard's graphs, drawn from the same metrics, on a page
the local API serves (``/dashboard``; its data at ``/dashboard/data``).

The graphs are the CloudWatch dashboard's own list (:data:`cdk.components.dashboard_widgets.ROWS`,
which imports no CDK): every graph with a series of streamlease's own metrics (the workers', the
auditor's and the reaper's, :data:`~cdk.components.dashboard_widgets.EMF_SOURCES`) is drawn
here with those series; the series of AWS services (ECS, Kinesis, API Gateway, SQS, DynamoDB)
exist only on CloudWatch, and graphs made of nothing else are listed under the page. A graph
added to that list appears here with no other change.

The metrics are the EMF documents the workers print on stdout (their logs,
``logs/worker-*.log``) and the Lambda host writes for the auditor and the reaper
(``logs/lambdas.log``). :class:`MetricStore` reads what was appended since it last looked, puts
each value in the bucket of its timestamp (``period`` seconds, as CloudWatch puts it in its
period), computes each series' statistic over its bucket as CloudWatch does, and keeps
:data:`HISTORY_SECONDS` of buckets: a stack left up for days holds the last hour, no more.

Above the graphs the page has a per-stream panel (:mod:`local.stream_panel`), read from the
API's stream list at each refresh: CloudWatch has no per-stream metrics to draw it from.
"""

from __future__ import annotations

import math
import random
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cdk.components.dashboard_widgets import EMF_SOURCES, ROWS, Graph, Series, Source
from local.gateway_events import HttpRequest, HttpResponse, Page, json_response
from local.jsonl_tail import JsonlTail
from local.stack_files import StackPaths
from local.stream_panel import read_stream_panel
from streamlease.cli.client import ApiClient
from streamlease.settings import Settings
from streamlease.stats import percentile
from streamlease.telemetry import AUDITOR_SERVICE, REAPER_SERVICE, WORKER_SERVICE

PAGE_PATH: Final = "/dashboard"
DATA_PATH: Final = "/dashboard/data"
HISTORY_SECONDS: Final = 3600.0
MAX_BACKLOG_BYTES: Final = 16 * 1024 * 1024
"""Of a log with more unread than this (a page opened after days) only the end is read: more
than an hour of a worker's metrics and logs."""
SAMPLES_PER_BUCKET: Final = 1000
"""Most values of one metric one bucket keeps for its percentiles (a random sample beyond)."""
PAGE: Final = Path(__file__).with_name("dashboard.html")

SOURCE_OF_SERVICE: Final = {
    WORKER_SERVICE: Source.WORKER,
    AUDITOR_SERVICE: Source.AUDITOR,
    REAPER_SERVICE: Source.REAPER,
}
"""The ``service`` dimension of an EMF document → the dashboard source it feeds."""


@dataclass(slots=True)
class Accumulator:
    """One metric's values in one bucket: exact count, sum, min and max, and a sample for
    percentiles (packed doubles: an hour of buckets is a few MB)."""

    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    sample: array[float] = field(default_factory=lambda: array("d"))

    def add(self, value: float) -> None:
        """Count ``value``."""
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)
        if len(self.sample) < SAMPLES_PER_BUCKET:
            self.sample.append(value)
        else:  # reservoir sampling: every value seen has the same chance to be kept
            slot = random.randrange(self.count)
            if slot < SAMPLES_PER_BUCKET:
                self.sample[slot] = value

    def statistic(self, name: str) -> float:
        """CloudWatch's statistic ``name``: ``Sum``, ``Average``, ``Maximum``, ``Minimum``,
        ``SampleCount`` or a percentile ``pNN``. Raises ``ValueError`` for another."""
        if name == "Sum":
            return self.total
        if name == "Average":
            return self.total / self.count
        if name == "Maximum":
            return self.high
        if name == "Minimum":
            return self.low
        if name == "SampleCount":
            return float(self.count)
        if name.startswith("p"):
            return percentile(sorted(self.sample), float(name[1:]))
        raise ValueError(f"unknown statistic {name!r}")


def emf_values(document: Mapping[str, Any]) -> tuple[Source, int, list[tuple[str, float]]] | None:
    """The source, timestamp (epoch ms) and ``(metric, value)`` pairs of one EMF document, or
    None for a line that is not one of streamlease's (a log line, another service's)."""
    meta = document.get("_aws")
    source = SOURCE_OF_SERVICE.get(str(document.get("service")))
    if not isinstance(meta, Mapping) or source is None:
        return None
    values = []
    for directive in meta.get("CloudWatchMetrics") or []:
        for metric in directive.get("Metrics") or []:
            name = metric.get("Name")
            raw = document.get(name)
            for value in raw if isinstance(raw, list) else [raw]:
                if isinstance(value, int | float) and not isinstance(value, bool):
                    values.append((str(name), float(value)))
    return source, int(meta.get("Timestamp") or 0), values


class MetricStore:
    """The stack's metrics in buckets of ``period_seconds``, read from its log files on demand.

    Thread-safe: the local API serves pages from several threads.
    """

    def __init__(
        self, logs_dir: Path, period_seconds: float, max_backlog_bytes: int = MAX_BACKLOG_BYTES
    ) -> None:
        self._logs_dir = logs_dir
        self._max_backlog_bytes = max_backlog_bytes
        self.period_ms = max(1, int(period_seconds * 1000))
        self._tail: JsonlTail[Mapping[str, Any]] = JsonlTail(lambda document: document)
        self._buckets: OrderedDict[int, dict[tuple[Source, str], Accumulator]] = OrderedDict()
        self._lock = threading.Lock()

    def read(
        self, now_ms: int, wanted: Iterable[Series]
    ) -> tuple[list[int], dict[Series, list[float | None]]]:
        """Read what the workers and the Lambda host appended since the last call, then give
        every bucket start from the oldest kept to the last one complete at ``now_ms`` (the one
        still filling would understate every sum) and each wanted series' statistic per bucket
        (None where it has no value)."""
        with self._lock:
            for path in sorted(self._logs_dir.glob("worker-*.log")):
                self._tail.follow(path)
            self._tail.follow(self._logs_dir / "lambdas.log")
            for document in self._tail.read_new(max_backlog_bytes=self._max_backlog_bytes):
                self._add(document)
            oldest = now_ms - int(HISTORY_SECONDS * 1000)
            while self._buckets and next(iter(self._buckets)) < oldest:
                self._buckets.popitem(last=False)
            last = now_ms - now_ms % self.period_ms - self.period_ms
            first = min(next(iter(self._buckets), last), last)
            starts = list(range(first, last + 1, self.period_ms))
            return starts, {series: self._points(series, starts) for series in wanted}

    def add(self, document: Mapping[str, Any]) -> None:
        """Count one EMF document (anything else is ignored)."""
        with self._lock:
            self._add(document)

    def _add(self, document: Mapping[str, Any]) -> None:
        found = emf_values(document)
        if found is None:
            return
        source, timestamp_ms, values = found
        start = timestamp_ms - timestamp_ms % self.period_ms
        bucket = self._buckets.get(start)
        if bucket is None:
            newest = next(reversed(self._buckets), None)
            bucket = self._buckets[start] = {}
            if newest is not None and start < newest:  # a late document: keep buckets in order
                self._buckets = OrderedDict(sorted(self._buckets.items()))
        for name, value in values:
            bucket.setdefault((source, name), Accumulator()).add(value)

    def _points(self, series: Series, starts: Iterable[int]) -> list[float | None]:
        """The series' statistic per bucket; a sum of several metrics (``series.plus``) adds
        those that have a value (None where none has)."""
        found: list[float | None] = []
        for start in starts:
            bucket = self._buckets.get(start, {})
            values = [
                accumulator.statistic(series.statistic)
                for key in series.parts
                if (accumulator := bucket.get(key)) is not None
            ]
            found.append(sum(values) if values else None)
        return found


def local_graphs() -> tuple[list[Graph], list[str]]:
    """The graphs drawn locally (their series narrowed to streamlease's own metrics), and the
    titles of those only CloudWatch can draw."""
    drawn, elsewhere = [], []
    for row in ROWS:
        for graph in row:
            left = tuple(s for s in graph.left if s.source in EMF_SOURCES)
            right = tuple(s for s in graph.right if s.source in EMF_SOURCES)
            if left or right:
                drawn.append(
                    Graph(graph.title, left, right, graph.per_second, graph.alarm, graph.events)
                )
            else:
                elsewhere.append(graph.title)
    return drawn, elsewhere


def dashboard_data(
    store: MetricStore, now_ms: int, streams: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What the page draws: every local graph's series as ``[bucket start ms, value]`` points,
    with the latest, lowest and highest value of each (over the hour kept); rates per second
    where the graph says so; and ``streams``, the per-stream panel
    (:func:`local.stream_panel.stream_panel`), when given."""
    graphs, elsewhere = local_graphs()
    starts, found = store.read(now_ms, {s for g in graphs for s in (*g.left, *g.right)})
    period_seconds = store.period_ms / 1000

    def lines(series_list: tuple[Series, ...], rate: bool) -> list[dict[str, Any]]:
        drawn = []
        for series in series_list:
            values = found[series]
            if rate:
                values = [None if v is None else v / period_seconds for v in values]
            known = [v for v in values if v is not None]
            drawn.append(
                {
                    "label": series.label or series.metric,
                    "points": [[t, v] for t, v in zip(starts, values, strict=True)],
                    "latest": known[-1] if known else None,
                    "min": min(known) if known else None,
                    "max": max(known) if known else None,
                }
            )
        return drawn

    return {
        "period_seconds": period_seconds,
        "refresh_seconds": min(5.0, max(1.0, period_seconds / 2)),
        "generated_at_ms": now_ms,
        "widgets": [
            {
                "title": graph.title,
                "per_second": graph.per_second,
                "events": graph.events,
                "left": lines(graph.left, graph.per_second),
                "right": lines(graph.right, False),
            }
            for graph in graphs
        ],
        "cloudwatch_only": elsewhere,
        "streams": streams,
    }


def dashboard_pages(settings: Settings) -> dict[str, Page]:
    """``/dashboard`` (the page) and ``/dashboard/data`` (its JSON) for the stack whose state
    directory ``settings`` name; buckets as long as the slower of the workers' metric flush
    and the auditor's run."""
    period = max(settings.local_metrics_flush_seconds, settings.local_auditor_seconds)
    store = MetricStore(StackPaths.for_settings(settings).logs_dir, period)
    html = PAGE.read_bytes()

    def page(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, [("Content-Type", "text/html; charset=utf-8")], html)

    api = ApiClient(f"http://{settings.local_host}:{settings.local_api_port}")

    def data(request: HttpRequest) -> HttpResponse:
        now_ms = time.time_ns() // 1_000_000
        return json_response(dashboard_data(store, now_ms, read_stream_panel(api, now_ms)))

    return {PAGE_PATH: page, DATA_PATH: data}
