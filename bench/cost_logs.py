"""What a worker's logs cost in production, from a steady window of a bench worker's log.

The bench's workers flush their metrics every few seconds so a window ends on flushes; a worker
in production flushes every ``Settings.metrics_flush_seconds`` (60 s). So the flush output is
priced once per production interval, at its largest, and everything else the window logged is
priced as measured.
"""

from __future__ import annotations

import contextlib
import io
import random
from pathlib import Path

from streamlease.settings import Settings
from worker.metrics import LATENCIES, MAX_EMF_VALUES, EmfPublisher, WorkerMetrics


def largest_flush_emf_bytes() -> int:
    """Bytes of the largest EMF document a worker's flush writes: every latency metric at
    :data:`~worker.metrics.MAX_EMF_VALUES` samples (a 60 s flush carries ~60 answer-age and
    loop-lag samples and a renewal every heartbeat; the cap bounds them), written by the
    worker's own publisher."""
    draw = random.Random(7)
    metrics = WorkerMetrics()
    for name in LATENCIES:
        for _ in range(MAX_EMF_VALUES):
            metrics.observe(name, draw.uniform(0.0, 5000.0))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        EmfPublisher(Settings().metrics_namespace).publish(metrics.take_snapshot())
    return len(out.getvalue().encode())


def production_log_rate(log: Path, span: tuple[int, int], seconds: float) -> float:
    """Log bytes per worker-second in production from a steady window of the worker's log
    (``span``: its byte offsets, ``seconds`` long): the lines other than a metrics flush as
    measured, plus one flush per production interval at its largest (the summary line as
    measured, the EMF document by :func:`largest_flush_emf_bytes`)."""
    with open(log, "rb") as f:
        f.seek(span[0])
        lines = f.read(span[1] - span[0]).splitlines(keepends=True)
    summaries = [len(line) for line in lines if b'"metrics flushed"' in line]
    other = sum(
        len(line)
        for line in lines
        if b'"metrics flushed"' not in line and not line.startswith(b'{"_aws"')
    )
    flush = max(summaries, default=0) + largest_flush_emf_bytes()
    return other / seconds + flush / Settings().metrics_flush_seconds
