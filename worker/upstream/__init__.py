"""Connecting to an upstream safely, and what each way a connection fails means.

:func:`connect_upstream` opens one connection (:mod:`worker.stream.transport`) to an address
the URL policy checked after DNS; the pure parts classify failed connects
(:func:`describe_connect_error`) and closes (:func:`describe_close`) and put the resume point
into the URL (:func:`with_query`). The reconnecting link of a stream is
:mod:`worker.stream.link`.
"""

from worker.upstream.connection import (
    ENDED_CLOSE_CODES,
    MAX_FRAME_BYTES,
    RETRYABLE_4XX,
    Failure,
    Resolver,
    connect_upstream,
    describe_close,
    describe_connect_error,
    with_query,
)

__all__ = [
    "ENDED_CLOSE_CODES",
    "MAX_FRAME_BYTES",
    "RETRYABLE_4XX",
    "Failure",
    "Resolver",
    "connect_upstream",
    "describe_close",
    "describe_connect_error",
    "with_query",
]
