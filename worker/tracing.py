"""Traces of a stream's start in the worker: acquire, connect, first delivered batch
(architecture §7).

The worker joins the X-Ray trace of whoever asked for the stream: the API's ``POST /streams``
or the reaper's handoff sends its command with the trace header as the SQS attribute
``AWSTraceHeader``, and the acquire becomes a child of that call. OpenTelemetry records the
spans, not the X-Ray SDK: that SDK and its daemon are in maintenance since February 2026 and
lose support in February 2027 (AWS points to OpenTelemetry), and OpenTelemetry keeps its context
in contextvars, which every asyncio task carries. On AWS the spans go as OTLP to the ADOT
collector beside the worker, which sends them to X-Ray.

Cost: spans exist only for a stream's start, never per message. Whether a start is traced
follows the caller's sampling decision (its header's ``Sampled``); a start no caller asked for
(an orphan, a takeover) starts a trace of its own for ``trace_sample_ratio`` of them. With
``trace_export = off`` (the default) OpenTelemetry is not imported at all and every call here
is a no-op.

Use (the whole API)::

    tracing = Tracing.from_settings(settings)             # once per process; .shutdown() at exit
    with tracing.acquire(stream_id, header, source="command") as trace:
        ...                                               # the conditional write
        trace.outcome("won")
    holder.trace = trace                                  # the holder carries it on
    with holder.trace.span(SpanName.CONNECT):             # around an awaited step
        ...
    holder.trace.first_batch(records)                     # after each acknowledged batch;
                                                          # only the first one is recorded
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from streamlease.settings import Settings
from streamlease.telemetry import TRACE_HTTP_HEADER, WORKER_SERVICE, SpanName, TraceExport

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

FILE_EXPORT_DELAY_MILLIS: Final = 500
"""How soon spans reach the trace file (the collector gets the SDK's default batching)."""
FLUSH_MILLIS: Final = 2000
OTLP_TIMEOUT_SECONDS: Final = 2.0
"""Bound on one export to the collector, retries included (spans are best effort)."""
ATTRIBUTE_PREFIX: Final = "streamlease."


class StreamTrace:
    """One stream start's place in a trace: the acquire span and what hangs below it."""

    def __init__(self, tracer: Tracer | None, acquire: Span | None) -> None:
        """``tracer`` None: not traced (tracing off, or not sampled); every call is a no-op."""
        self._tracer = tracer
        self._acquire = acquire
        self._parent: Context | None = None
        self._started_ns = time.time_ns()
        self._first_batch_done = tracer is None
        if tracer is not None and acquire is not None:
            from opentelemetry import trace

            self._parent = trace.set_span_in_context(acquire)

    @property
    def traced(self) -> bool:
        """True when this start's spans are recorded."""
        return self._tracer is not None

    def outcome(self, value: str) -> None:
        """Record how the acquire ended (``won``, ``owned``, ``stopped``, ...)."""
        if self._acquire is not None:
            self._acquire.set_attribute(ATTRIBUTE_PREFIX + "outcome", value)

    @contextlib.contextmanager
    def span(self, name: str, **attributes: str | int | float | bool) -> Iterator[None]:
        """A child span of the acquire around the ``with`` block (an exception marks it
        failed and passes on)."""
        if self._tracer is None:
            yield
            return
        with self._tracer.start_as_current_span(
            name, context=self._parent, attributes=_attributes(attributes)
        ):
            yield

    def first_batch(self, records: int) -> None:
        """Record the span from the acquire to now, the first time it is called (a bool test
        afterwards: nothing per message or per later batch)."""
        if self._first_batch_done or self._tracer is None:
            return
        self._first_batch_done = True
        span = self._tracer.start_span(
            SpanName.FIRST_BATCH,
            context=self._parent,
            start_time=self._started_ns,
            attributes=_attributes({"records": records}),
        )
        span.end()


UNTRACED: Final = StreamTrace(None, None)
"""The trace of a start that is not recorded."""


class Tracing:
    """The worker's tracer: off, or OpenTelemetry spans to a file or the collector."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        """``provider`` None: tracing off. Build with :meth:`from_settings`."""
        self._provider = provider
        self._tracer = None if provider is None else provider.get_tracer("streamlease.worker")

    @classmethod
    def from_settings(cls, settings: Settings, exporter: SpanExporter | None = None) -> Tracing:
        """Tracing as ``settings`` say (``exporter``: instead of theirs, for tests)."""
        if settings.trace_export is TraceExport.OFF and exporter is None:
            return cls()
        from opentelemetry.sdk.extension.aws.trace import AwsXRayIdGenerator
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        provider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: WORKER_SERVICE}),
            sampler=ParentBased(root=TraceIdRatioBased(settings.trace_sample_ratio)),
            # X-Ray trace ids start with the time of the trace.
            id_generator=AwsXRayIdGenerator(),
        )
        delay: dict[str, Any] = {}
        if exporter is None:
            exporter = _exporter(settings)
            if settings.trace_export is TraceExport.FILE:
                delay["schedule_delay_millis"] = FILE_EXPORT_DELAY_MILLIS
        # Spans are exported from the processor's own thread, never from the event loop.
        provider.add_span_processor(BatchSpanProcessor(exporter, **delay))
        return cls(provider)

    @property
    def enabled(self) -> bool:
        """True when spans may be recorded at all."""
        return self._tracer is not None

    @contextlib.contextmanager
    def acquire(
        self, stream_id: str, trace_header: str | None, *, source: str
    ) -> Iterator[StreamTrace]:
        """The acquire span of ``stream_id`` around the ``with`` block, a child of the X-Ray
        ``trace_header`` when there is one (a command's), else the root of a new trace (if
        sampled). Yields the :class:`StreamTrace` the holder carries on."""
        tracer = self._tracer
        if tracer is None:
            yield UNTRACED
            return
        from opentelemetry.propagators.aws import AwsXRayPropagator

        parent = (
            AwsXRayPropagator().extract({TRACE_HTTP_HEADER: trace_header}) if trace_header else None
        )
        attributes = _attributes({"stream_id": stream_id, "source": source})
        with tracer.start_as_current_span(
            SpanName.ACQUIRE, context=parent, attributes=attributes
        ) as span:
            yield StreamTrace(tracer, span) if span.is_recording() else UNTRACED

    def shutdown(self) -> None:
        """Export what is buffered, for at most :data:`FLUSH_MILLIS`, and stop (at the worker's
        exit: an unreachable collector must not hold up the end of a drain)."""
        if self._provider is not None:
            self._provider.force_flush(timeout_millis=FLUSH_MILLIS)
            self._provider.shutdown()


def _exporter(settings: Settings) -> SpanExporter:
    if settings.trace_export is TraceExport.FILE:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        path = Path(settings.trace_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        out = path.open("a", encoding="utf-8")  # the exporter writes to it until the exit
        return ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=settings.trace_otlp_endpoint, timeout=OTLP_TIMEOUT_SECONDS)


def _attributes(values: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
    return {ATTRIBUTE_PREFIX + key: value for key, value in values.items()}
