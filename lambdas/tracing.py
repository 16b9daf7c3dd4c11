"""X-Ray tracing of the Lambdas (Powertools Tracer) and the trace header their commands carry.

One :data:`tracer` for the three handlers; the service is the function's
``POWERTOOLS_SERVICE_NAME``. It is active only inside Lambda (elsewhere Powertools disables it and
nothing X-Ray is imported) and patches botocore alone, when the first client is made
(:func:`patch_clients`): every DynamoDB and SQS call is a subsegment, nothing else is imported
to be patched, and importing a handler does not import botocore.

A command sent to the workers carries the trace header of the call that sent it
(:func:`command_trace_header`), so the worker's acquire joins this trace.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from aws_lambda_powertools import Tracer

from streamlease.telemetry import TRACE_HTTP_HEADER

tracer = Tracer(auto_patch=False)

_patch_lock = threading.Lock()
_patched = False


def patch_clients() -> None:
    """Patch botocore for X-Ray (once; nothing when tracing is disabled). Called before the
    first client is made: patching imports botocore, which costs a cold start that answers
    without a client nothing."""
    global _patched
    with _patch_lock:
        if not _patched:
            tracer.patch(modules=("botocore",))
            _patched = True


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
