"""X-Ray tracing of the Lambdas (Powertools Tracer) and the trace header their commands carry.

One :data:`tracer` for the three handlers; the service is the function's
``POWERTOOLS_SERVICE_NAME``. It is active only inside Lambda (elsewhere Powertools disables it and
nothing X-Ray is imported) and patches botocore alone: every DynamoDB and SQS call is a
subsegment, and nothing else is imported to be patched at a cold start.

A command sent to the workers carries the trace header of the call that sent it
(:func:`command_trace_header`), so the worker's acquire joins this trace.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_lambda_powertools import Tracer

from streamlease.telemetry import TRACE_HTTP_HEADER

tracer = Tracer(patch_modules=("botocore",))


def command_trace_header(request_headers: Mapping[str, str] | None = None) -> str | None:
    """The X-Ray trace header to send with a command: the current (sub)segment's inside Lambda;
    else the request's own ``X-Amzn-Trace-Id`` (the local API passes it on, as API Gateway
    does); else None."""
    if not tracer.disabled:
        from aws_xray_sdk.core import xray_recorder
        from aws_xray_sdk.core.exceptions.exceptions import SegmentNotFoundException
        from aws_xray_sdk.core.models.trace_header import TraceHeader

        try:
            entity = xray_recorder.get_trace_entity()
        except SegmentNotFoundException:
            entity = None
        if entity is not None and getattr(entity, "trace_id", None):
            return str(
                TraceHeader(
                    root=entity.trace_id, parent=entity.id, sampled=int(bool(entity.sampled))
                ).to_header_str()
            )
    for name, value in (request_headers or {}).items():
        if name.lower() == TRACE_HTTP_HEADER.lower() and value:
            return value
    return None
