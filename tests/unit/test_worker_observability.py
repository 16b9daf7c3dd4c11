"""Metrics (EMF, zeros included), the lease event log and the health check file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from streamlease.lease_events import LeaseEventKind
from streamlease.telemetry import WORKER_SERVICE, WorkerMetric
from worker.health import is_fresh, mark_unhealthy, reset, touch, unhealthy_reason
from worker.health import main as health_main
from worker.lease_event_log import LeaseEventLog
from worker.metrics import COUNTERS, MAX_EMF_VALUES, EmfPublisher, WorkerMetrics, summarize


def emf_documents(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"_aws"')]


def test_every_metric_is_emitted_even_when_nothing_happened(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A quiet interval still publishes every counter as 0: alarms see "nothing", not "no data"."""
    metrics = WorkerMetrics(lambda: 0)
    EmfPublisher("Streamlease").publish(metrics.take_snapshot())
    (doc,) = emf_documents(capsys.readouterr().out)
    declared = {m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]}  # type: ignore[index]
    expected = set(COUNTERS) | {
        WorkerMetric.ACTIVE_CONNECTIONS,
        WorkerMetric.RENEWAL_LAG_MS,
        WorkerMetric.EVENT_LOOP_LAG_MS,
        WorkerMetric.RENEWAL_ANSWER_AGE_MS,
    }
    assert declared == expected
    assert all(doc[name] == [0.0] for name in COUNTERS)
    assert doc["service"] == WORKER_SERVICE
    assert doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Streamlease"  # type: ignore[index]


def test_counters_reset_per_interval_and_latencies_fit_one_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Counters cover one flush interval; thousands of latency samples become at most 99
    values in a single document (CloudWatch's limit per metric is 100)."""
    metrics = WorkerMetrics(lambda: 3)
    publisher = EmfPublisher("Streamlease")
    metrics.incr(WorkerMetric.MESSAGES_RECEIVED, 5)
    for i in range(5000):
        metrics.observe(WorkerMetric.RENEWAL_LAG_MS, float(i))
    publisher.publish(metrics.take_snapshot())
    publisher.publish(metrics.take_snapshot())
    first, second = emf_documents(capsys.readouterr().out)
    assert first[WorkerMetric.MESSAGES_RECEIVED] == [5.0]
    assert first[WorkerMetric.ACTIVE_CONNECTIONS] == [3.0]
    assert len(first[WorkerMetric.RENEWAL_LAG_MS]) == MAX_EMF_VALUES  # type: ignore[arg-type]
    assert second[WorkerMetric.MESSAGES_RECEIVED] == [0.0]
    assert metrics.total(WorkerMetric.MESSAGES_RECEIVED) == 5


def test_latency_summary_is_exact() -> None:
    summary = summarize([float(v) for v in range(1, 101)])
    assert (summary.count, summary.p50, summary.max) == (100, 50.5, 100.0)
    assert summary.p99 == pytest.approx(99.01)
    assert summarize([]).emitted == (0.0,)


def test_lease_events_are_one_json_line_each(tmp_path: Path) -> None:
    """Each event is a line with the fields the invariant checker reads; deadlines only where
    they mean something."""
    path = tmp_path / "events" / "w.jsonl"
    log = LeaseEventLog(str(path), "w1/1-abcd")
    before = time.monotonic()
    log.record(LeaseEventKind.ACQUIRED, "s1", 3, deadline_mono=before + 10)
    log.record(LeaseEventKind.RELEASED, "s1", 3)
    log.close()
    acquired, released = (json.loads(line) for line in path.read_text().splitlines())
    assert acquired["event"] == "acquired"
    assert acquired["deadline_mono"] == before + 10
    assert acquired["worker_id"] == "w1/1-abcd"
    assert acquired["epoch"] == 3
    assert before <= acquired["mono"] <= released["mono"]
    assert acquired["wall_ms"] > 0
    assert "deadline_mono" not in released


def test_no_event_log_unless_configured(tmp_path: Path) -> None:
    log = LeaseEventLog("", "w")
    log.record(LeaseEventKind.LOST, "s", 1)
    assert not log.enabled
    assert list(tmp_path.iterdir()) == []


def test_the_health_file_is_fresh_only_while_touched(tmp_path: Path) -> None:
    path = str(tmp_path / "health")
    assert not is_fresh(path, 30.0)
    touch(path)
    assert is_fresh(path, 30.0)
    old = time.time() - 60
    os.utime(path, (old, old))
    assert not is_fresh(path, 30.0)
    touch(path)
    assert is_fresh(path, 30.0)


def test_a_health_file_that_says_why_fails_the_check_however_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m worker.health``: a freshly touched file passes; one the worker wrote a
    reason into fails with that reason, touched or not; a new process starts it empty."""
    path = str(tmp_path / "health")
    monkeypatch.setenv("STREAMLEASE_HEALTH_FILE", path)
    reset(path)
    assert health_main() == 0
    mark_unhealthy(path, "no session renewal answered for 81 s")
    touch(path)
    assert health_main() == 1
    assert "unhealthy: no session renewal answered for 81 s" in capsys.readouterr().err
    reset(path)
    assert unhealthy_reason(path) is None
    assert health_main() == 0
