"""The local dashboard's data: the CloudWatch dashboard's graphs, computed as CloudWatch would
from the very EMF documents the workers and the auditor print, with a bounded history."""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

import local.dashboard
from cdk.components.dashboard_widgets import EMF_SOURCES, ROWS, Graph, Series, Source
from lambdas import runtime
from lambdas.metrics import MetricEmitter
from local.dashboard import (
    HISTORY_SECONDS,
    SAMPLES_PER_BUCKET,
    Accumulator,
    MetricStore,
    dashboard_data,
    local_graphs,
)
from streamlease.settings import Settings
from streamlease.telemetry import (
    AUDITOR_SERVICE,
    REAPER_SERVICE,
    AuditorMetric,
    ReaperMetric,
    WorkerMetric,
)
from worker.metrics import EmfPublisher, WorkerMetrics

PERIOD = 10.0


def worker_flush(log: Path, held: int, **counts: int) -> None:
    """One worker metrics flush, exactly as the worker prints it, appended to its log."""
    metrics = WorkerMetrics(lambda: held)
    for name, count in counts.items():
        metrics.incr(name, count)
    metrics.observe(WorkerMetric.RENEWAL_LAG_MS, 4.0)
    metrics.observe(WorkerMetric.RENEWAL_ANSWER_AGE_MS, 1000.0 * held)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        EmfPublisher("Streamlease").publish(metrics.take_snapshot())
    with open(log, "a", encoding="utf-8") as handle:
        handle.write("a log line that is not a metric\n" + out.getvalue())


def reap(log: Path, released: int) -> None:
    """One reaper run's metrics (a crashed task's streams freed), as the Lambda host writes
    them."""
    runtime.configure(Settings())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        MetricEmitter(REAPER_SERVICE).emit(
            {ReaperMetric.UNPLANNED_TASK_STOPS: 1, ReaperMetric.LEASES_RELEASED: released}
        )
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(out.getvalue())


def audit(log: Path, started: int, owned: int) -> None:
    """One auditor run's metrics, as the Lambda host writes them."""
    runtime.configure(Settings())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        MetricEmitter(AUDITOR_SERVICE).emit(
            {AuditorMetric.STARTED_STREAMS: started, AuditorMetric.OWNED_STREAMS: owned}
        )
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(out.getvalue())


def widget(data: dict[str, Any], metric: str) -> dict[str, Any]:
    """The widget (and the line) drawing ``metric``: ``{"widget": ..., "line": ...}``."""
    for found in data["widgets"]:
        for line in found["left"] + found["right"]:
            if line["label"] == metric or metric in found["title"]:
                return {"widget": found, "line": line}
    raise AssertionError(f"no widget draws {metric}")


def later() -> int:
    """Two periods from now: the bucket of what was just written is complete."""
    return time.time_ns() // 1_000_000 + int(2 * PERIOD * 1000)


def test_workers_and_the_auditor_are_read_as_cloudwatch_aggregates_them(tmp_path: Path) -> None:
    """Counters summed over the workers, per second where the graph says so; a gauge's
    average, maximum and minimum per task; the auditor's latest counts."""
    worker_flush(tmp_path / "worker-aaaa.log", held=4, Takeovers=2, MessagesReceived=300)
    worker_flush(tmp_path / "worker-bbbb.log", held=6, Takeovers=1, MessagesReceived=100)
    audit(tmp_path / "lambdas.log", started=10, owned=9)
    data = dashboard_data(MetricStore(tmp_path, PERIOD), later())

    lines = {
        line["label"]: line["latest"]
        for found in data["widgets"]
        for line in found["left"] + found["right"]
    }
    assert lines["takeovers"] == 3
    assert lines["messages/s"] == 400 / PERIOD
    assert lines["average per task"] == 5 and lines["maximum per task"] == 6
    assert lines["minimum per task"] == 4
    assert lines[AuditorMetric.STARTED_STREAMS] == 10 and lines[AuditorMetric.OWNED_STREAMS] == 9
    assert lines["renewal lag p99"] == 4.0
    assert lines["answer age max"] == 6000.0  # the worst worker's: a gray failure shows
    assert data["period_seconds"] == PERIOD


def test_new_lines_are_read_as_they_are_appended(tmp_path: Path) -> None:
    """The store follows the logs: a flush written after the first read counts at the next,
    and a worker that started since (a new log file) is found."""
    store = MetricStore(tmp_path, PERIOD)
    worker_flush(tmp_path / "worker-aaaa.log", held=1, Takeovers=1)
    now = later()
    assert widget(dashboard_data(store, now), "Lease churn")["widget"]["left"][1]["latest"] == 1
    worker_flush(tmp_path / "worker-cccc.log", held=1, Takeovers=5)
    churn = widget(dashboard_data(store, now), "Lease churn")["widget"]
    assert churn["left"][1]["label"] == "takeovers"
    assert churn["left"][1]["latest"] == 6


def test_the_bucket_still_filling_is_not_shown(tmp_path: Path) -> None:
    """A sum over half a period would read as a drop: the last point is the last whole one."""
    log = tmp_path / "worker-aaaa.log"
    worker_flush(log, held=1, MessagesReceived=50)
    written = json.loads(log.read_text().splitlines()[-1])["_aws"]["Timestamp"]
    line = widget(dashboard_data(MetricStore(tmp_path, PERIOD), written), "messages/s")["line"]
    assert line["latest"] is None


def test_every_graph_of_streamleases_own_metrics_is_drawn(tmp_path: Path) -> None:
    """The local page draws the CloudWatch dashboard's list: each graph with a series of the
    workers', the auditor's or the reaper's metrics, those series only; the others are named
    as CloudWatch's alone."""
    drawn, elsewhere = local_graphs()
    everything = [graph for row in ROWS for graph in row]
    assert len(drawn) + len(elsewhere) == len(everything)
    for graph in drawn:
        assert graph.left + graph.right
        assert all(s.source in EMF_SOURCES for s in graph.left + graph.right)
    own = [g for g in everything if any(s.source in EMF_SOURCES for s in g.left + g.right)]
    assert [g.title for g in drawn] == [g.title for g in own]
    data = dashboard_data(MetricStore(tmp_path, PERIOD), later())
    assert [w["title"] for w in data["widgets"]] == [g.title for g in own]
    assert data["cloudwatch_only"] == elsewhere


def test_a_graph_added_to_the_list_is_drawn_with_no_other_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new widget is one entry in the widget list."""
    extra = Graph("Streams lost", (Series(Source.WORKER, WorkerMetric.LEASES_LOST),))
    monkeypatch.setattr(local.dashboard, "ROWS", (*ROWS, (extra,)))
    worker_flush(tmp_path / "worker-aaaa.log", held=1, LeasesLost=2)
    data = dashboard_data(MetricStore(tmp_path, PERIOD), later())
    assert data["widgets"][-1]["title"] == "Streams lost"
    assert data["widgets"][-1]["left"][0]["latest"] == 2


def test_history_is_bounded(tmp_path: Path) -> None:
    """A stack left up for days keeps an hour of buckets, no more."""
    store = MetricStore(tmp_path, PERIOD)
    start_ms = 1_700_000_000_000
    for n in range(int(3 * HISTORY_SECONDS / PERIOD)):
        at = start_ms + int(n * PERIOD * 1000)
        store.add(
            {
                "_aws": {
                    "Timestamp": at,
                    "CloudWatchMetrics": [{"Metrics": [{"Name": WorkerMetric.TAKEOVERS}]}],
                },
                "service": "streamlease-worker",
                WorkerMetric.TAKEOVERS: 1,
            }
        )
    series = Series(Source.WORKER, WorkerMetric.TAKEOVERS)
    starts, found = store.read(at + int(PERIOD * 1000), [series])
    assert len(starts) <= HISTORY_SECONDS / PERIOD + 1
    assert found[series][-1] == 1


def test_statistics_are_cloudwatchs() -> None:
    """Sum, Average, Maximum, Minimum, SampleCount and percentiles; a bounded sample."""
    accumulator = Accumulator()
    for value in range(1, 101):
        accumulator.add(float(value))
    assert accumulator.statistic("Sum") == 5050
    assert accumulator.statistic("Average") == 50.5
    assert accumulator.statistic("Maximum") == 100 and accumulator.statistic("Minimum") == 1
    assert accumulator.statistic("SampleCount") == 100
    assert 98 <= accumulator.statistic("p99") <= 100
    for value in range(5 * SAMPLES_PER_BUCKET):
        accumulator.add(float(value))
    assert len(accumulator.sample) == SAMPLES_PER_BUCKET
    assert accumulator.statistic("SampleCount") == 100 + 5 * SAMPLES_PER_BUCKET


def test_a_page_opened_after_days_reads_the_end_of_each_log_only(tmp_path: Path) -> None:
    """Logs grown for days are not read whole: the store takes the whole lines of their end,
    where the last hour is, so memory does not follow the log's size."""
    log = tmp_path / "worker-aaaa.log"
    log.write_text(("x" * 99 + "\n") * 30_000)  # 3 MB of old log lines
    worker_flush(log, held=1, Takeovers=7)
    store = MetricStore(tmp_path, PERIOD, max_backlog_bytes=64 * 1024)
    churn = widget(dashboard_data(store, later()), "Lease churn")["widget"]
    assert churn["left"][1]["latest"] == 7
    assert store._tail.malformed < 1000  # read ~64 KB of the 3 MB


def test_takeovers_count_the_reapers_crash_fast_path_too(tmp_path: Path) -> None:
    """A ``kill -9``'s streams are freed by the reaper (each a takeover on its stream item,
    and no worker's Takeovers): the events graph's takeovers line adds both."""
    worker_flush(tmp_path / "worker-aaaa.log", held=1, Takeovers=1, LeasesAcquired=5)
    reap(tmp_path / "lambdas.log", released=4)
    events = widget(dashboard_data(MetricStore(tmp_path, PERIOD), later()), "Events")["widget"]
    assert events["events"] is True
    lines = {line["label"]: line["latest"] for line in events["left"]}
    assert lines["takeovers"] == 5 and lines["unplanned stops"] == 1


def test_a_legend_has_the_last_lowest_and_highest_value(tmp_path: Path) -> None:
    """Each line carries its last, min and max over the hour kept, not its last alone."""
    store = MetricStore(tmp_path, PERIOD)
    start_ms = time.time_ns() // 1_000_000 - int(5 * PERIOD * 1000)
    for n, count in enumerate((3, 9, 1)):
        store.add(
            {
                "_aws": {
                    "Timestamp": start_ms + int(n * PERIOD * 1000),
                    "CloudWatchMetrics": [{"Metrics": [{"Name": WorkerMetric.LEASES_LOST}]}],
                },
                "service": "streamlease-worker",
                WorkerMetric.LEASES_LOST: count,
            }
        )
    churn = widget(dashboard_data(store, later()), "Lease churn")["widget"]
    lost = next(line for line in churn["left"] if line["label"] == WorkerMetric.LEASES_LOST)
    assert (lost["latest"], lost["min"], lost["max"]) == (1, 1, 9)


def test_the_renewal_answer_age_has_an_axis_of_its_own(tmp_path: Path) -> None:
    """A heartbeat's seconds on the lags' milliseconds axis would flatten the lags: the page's
    lag graph draws the answer age alone on its right axis, as CloudWatch's does."""
    worker_flush(tmp_path / "worker-aaaa.log", held=3)
    lag = widget(dashboard_data(MetricStore(tmp_path, PERIOD), later()), "Renewal and")["widget"]
    assert [line["label"] for line in lag["right"]] == ["answer age max"]
    assert lag["left"] and all("lag" in line["label"] for line in lag["left"])
    assert lag["right"][0]["latest"] == 3000.0
