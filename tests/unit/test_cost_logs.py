"""Pricing a worker's logs at production's metrics flush interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import cost_logs
from streamlease.settings import Settings


def test_a_flush_at_its_largest_is_priced_from_the_workers_own_publisher(tmp_path: Path) -> None:
    """The production log rate counts one largest flush per interval on top of what else the
    window logged, never the EMF lines of the bench's own (shorter) flushes."""
    log = tmp_path / "worker.log"
    other = b'{"level":"INFO","message":"upstream connected"}\n'
    summary = b'{"level":"INFO","message":"metrics flushed","active_connections":3}\n'
    emf = b'{"_aws":{"Timestamp":1}}\n'
    log.write_bytes(other + emf + summary + emf + summary)
    rate = cost_logs.production_log_rate(log, (0, log.stat().st_size), 2.0)
    largest = cost_logs.largest_flush_emf_bytes()
    assert largest > 1000
    interval = Settings().metrics_flush_seconds
    assert rate == pytest.approx(len(other) / 2.0 + (len(summary) + largest) / interval)
