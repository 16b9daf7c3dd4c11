"""The worker's spans of a stream's start: in the caller's trace, sampled as it says, never more
than one span per step, and nothing at all with tracing off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamlease.settings import Settings
from streamlease.telemetry import SpanName, TraceExport
from worker.tracing import ATTRIBUTE_PREFIX, UNTRACED, Tracing

TRACE_ROOT = "1-5759e988-bd862e3fe1be46a994272793"
PARENT = "53995c3f42cd8ad8"
SAMPLED = f"Root={TRACE_ROOT};Parent={PARENT};Sampled=1"
NOT_SAMPLED = f"Root={TRACE_ROOT};Parent={PARENT};Sampled=0"


def _tracing(ratio: float = 0.0) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    settings = Settings(trace_sample_ratio=ratio)
    return Tracing.from_settings(settings, exporter=exporter), exporter


def _finished(tracing: Tracing, exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    tracing.shutdown()
    return {span.name: span for span in exporter.get_finished_spans()}


def test_the_acquire_joins_the_commands_trace_below_its_sender() -> None:
    """Same trace id as the X-Ray root, parent = the sender's segment, stream and outcome."""
    tracing, exporter = _tracing()
    with tracing.acquire("s1", SAMPLED, source="start") as trace:
        trace.outcome("won")
    span = _finished(tracing, exporter)[SpanName.ACQUIRE]
    assert span.context is not None and span.parent is not None
    assert f"{span.context.trace_id:032x}" == TRACE_ROOT[2:].replace("-", "")
    assert f"{span.parent.span_id:016x}" == PARENT
    assert span.attributes is not None
    assert span.attributes[ATTRIBUTE_PREFIX + "stream_id"] == "s1"
    assert span.attributes[ATTRIBUTE_PREFIX + "outcome"] == "won"


def test_a_caller_that_did_not_sample_gets_no_spans() -> None:
    """``Sampled=0`` in the command's header: nothing recorded, the holder's trace is a no-op."""
    tracing, exporter = _tracing(ratio=1.0)
    with tracing.acquire("s1", NOT_SAMPLED, source="start") as trace:
        pass
    assert trace is UNTRACED
    assert _finished(tracing, exporter) == {}


@pytest.mark.parametrize(("ratio", "traced"), [(0.0, False), (1.0, True)])
def test_starts_no_caller_traced_are_sampled_by_the_ratio(ratio: float, traced: bool) -> None:
    """An orphan or a takeover has no header: a root span for ``trace_sample_ratio`` of them."""
    tracing, exporter = _tracing(ratio)
    with tracing.acquire("s1", None, source="orphan") as trace:
        pass
    assert trace.traced is traced
    spans = _finished(tracing, exporter)
    assert (SpanName.ACQUIRE in spans) is traced
    if traced:
        assert spans[SpanName.ACQUIRE].parent is None


def test_connect_and_first_batch_hang_below_the_acquire_and_the_first_batch_counts_once() -> None:
    """The holder's steps are children of the acquire; later batches add no span."""
    tracing, exporter = _tracing()
    with tracing.acquire("s1", SAMPLED, source="start") as trace:
        pass
    with trace.span(SpanName.CONNECT, attempt=1):
        pass
    for records in (3, 5, 7):
        trace.first_batch(records)
    spans = _finished(tracing, exporter)
    acquire = spans[SpanName.ACQUIRE]
    assert acquire.context is not None
    assert len(exporter.get_finished_spans()) == 3
    for name in (SpanName.CONNECT, SpanName.FIRST_BATCH):
        span = spans[name]
        assert span.parent is not None and span.context is not None
        assert span.parent.span_id == acquire.context.span_id
        assert span.context.trace_id == acquire.context.trace_id
    first = spans[SpanName.FIRST_BATCH]
    assert first.attributes is not None
    assert first.attributes[ATTRIBUTE_PREFIX + "records"] == 3
    assert first.start_time is not None and acquire.start_time is not None
    assert first.start_time >= acquire.start_time


def test_a_failed_step_marks_its_span_failed_and_raises() -> None:
    """An exception inside ``trace.span`` is recorded on the span and passes on."""
    tracing, exporter = _tracing()
    with tracing.acquire("s1", SAMPLED, source="start") as trace:
        pass
    with pytest.raises(OSError), trace.span(SpanName.CONNECT):
        raise OSError("refused")
    span = _finished(tracing, exporter)[SpanName.CONNECT]
    assert not span.status.is_ok


def test_file_export_appends_one_json_span_per_line(tmp_path: Path) -> None:
    """``trace_export=file``: what the local stack and the tests read."""
    path = tmp_path / "traces" / "w1.jsonl"
    tracing = Tracing.from_settings(Settings(trace_export=TraceExport.FILE, trace_file=str(path)))
    with tracing.acquire("s1", SAMPLED, source="start") as trace:
        trace.outcome("won")
    tracing.shutdown()
    (line,) = path.read_text().splitlines()
    span = json.loads(line)
    assert span["name"] == SpanName.ACQUIRE
    assert span["context"]["trace_id"] == "0x" + TRACE_ROOT[2:].replace("-", "")
    assert span["parent_id"] == "0x" + PARENT


def test_with_tracing_off_opentelemetry_is_never_imported() -> None:
    """The default costs nothing: no import, every call a no-op."""
    probe = """
import sys
from streamlease.settings import Settings
from worker.tracing import Tracing
tracing = Tracing.from_settings(Settings())
with tracing.acquire("s1", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1", source="x") as t:
    t.outcome("won")
    t.first_batch(1)
tracing.shutdown()
print(tracing.enabled, any(m.startswith("opentelemetry") for m in sys.modules))
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]
