"""The benchmark harness runs: its smallest write-cost measurement, on a real worker per preset.

``make bench`` is not part of ``make test``; this proves the request counter still hooks into a
worker process, tells session renewals from per-stream renewals and prices what each sends
(nothing is asserted about speed).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bench import write_cost
from bench.common import Progress
from bench.context import DEFAULT_SCALE, PER_STREAM, SESSIONS, BenchContext
from local.moto_process import MotoProcess
from streamlease.indexes import BY_SHARD_EXPIRY, FLEET

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.alone]

STREAMS = 3
HEARTBEATS = 4


def context(moto_server: MotoProcess, tmp_path: Path) -> BenchContext:
    return BenchContext(
        quick=True, progress=Progress(1, stream=io.StringIO()), work_dir=tmp_path, _moto=moto_server
    )


def test_a_session_worker_renews_its_session_and_no_stream_in_a_steady_window(
    moto_server: MotoProcess, tmp_path: Path
) -> None:
    """Sessions: the window counts session renewals (the worker item, table + fleet-index
    units, no key move), no stream renewal (no write sets a lease's expiry), and divides by the
    streams really held. A stream's progress counters may go alone once in the window (their
    first write is due at a random point of ``progress_seconds``), and on a busy machine an
    upstream that reconnected writes its connection state: neither moves an index entry."""
    ctx = context(moto_server, tmp_path)
    [window] = write_cost.measure(ctx, SESSIONS, (STREAMS,), HEARTBEATS, scale=DEFAULT_SCALE)
    counts = window.counts
    renewals = counts["by_target"].get(write_cost.SESSION_RENEWAL, 0)
    assert renewals >= HEARTBEATS - 1, counts
    assert counts["expiry_writes_by_request"].get(write_cost.STREAM_WRITE, 0) == 0, counts
    assert counts["write_units"].get(BY_SHARD_EXPIRY.name, 0) == 0, counts
    assert counts["write_units"].get(FLEET.name, 0) == renewals, counts
    assert counts["write_units_by_request"][write_cost.SESSION_RENEWAL] == 2 * renewals, counts
    assert window.held == STREAMS
    assert window.worker_item_bytes is not None and window.worker_item_bytes < 1024


def test_a_per_stream_worker_renews_every_stream_and_moves_its_index_entry(
    moto_server: MotoProcess, tmp_path: Path
) -> None:
    """Per-stream: every held stream is renewed in the window, and each renewal (a write that
    sets the lease's expiry) moved the by-shard-expiry index entry (delete + insert) on top of
    its table write. Other writes to the item move none: a stream's progress counters (their
    first write is due at a random point of ``progress_seconds``) and, on a busy machine, the
    connection state of an upstream that reconnected."""
    ctx = context(moto_server, tmp_path)
    [window] = write_cost.measure(ctx, PER_STREAM, (STREAMS,), HEARTBEATS, scale=DEFAULT_SCALE)
    counts = window.counts
    renewals = counts["expiry_writes_by_request"].get(write_cost.STREAM_WRITE, 0)
    assert renewals >= STREAMS * (HEARTBEATS - 1), counts
    assert counts["write_units"].get(BY_SHARD_EXPIRY.name, 0) == 2 * renewals, counts
    assert window.held == STREAMS
