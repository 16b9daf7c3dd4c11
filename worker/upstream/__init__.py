"""The upstream WebSocket connection of one stream: safe connect, resume, dedupe, own reconnects.

:class:`UpstreamReader` is an async iterator of :class:`UpstreamMessage` in ``seq`` order. It knows
nothing of leases: its owner decides when to stop and with which close code.

* **Connect** (:func:`connect_upstream`): the URL passes :func:`parse_upstream_url` again, the host
  is resolved and *every* address is checked against the URL policy, then the socket goes to a
  checked address (``host=``) while TLS SNI and the ``Host`` header keep the URL's name. No proxy
  (the environment's proxy variables are ignored), no redirects, no compression.
* **Resume**: each connect asks for ``last delivered seq + 1`` through ``settings.resume_param``.
* **Reconnect**: exponential backoff with full jitter that resets only after a connection stayed
  up ``settings.stable_seconds``. websockets' own reconnecting iterator resets after every
  handshake, so an upstream that accepts and drops would see a tight loop.
* **Outcomes**: close 1000 from the upstream ends the iteration (the stream is finished); 4xx at
  handshake (except 408/425/429), 3xx and a refused address raise :class:`UpstreamRejected`;
  everything else (1001, 1006, 1011-1014, 5xx, refused, timeouts, DNS) is retried. Every
  failure is reported to the ``on_event`` hook with a short message that never contains the
  URL, its query or upstream text.
"""

from worker.upstream.connection import (
    CLOSE_TIMEOUT_SECONDS,
    ENDED_CLOSE_CODES,
    MAX_FRAME_BYTES,
    RETRYABLE_4XX,
    Failure,
    Resolver,
    connect_upstream,
    describe_close,
    describe_connect_error,
    with_resume_param,
)
from worker.upstream.reader import (
    HeadersUnavailable,
    UpstreamEvent,
    UpstreamEventKind,
    UpstreamMessage,
    UpstreamReader,
    UpstreamStats,
)

__all__ = [
    "CLOSE_TIMEOUT_SECONDS",
    "ENDED_CLOSE_CODES",
    "MAX_FRAME_BYTES",
    "RETRYABLE_4XX",
    "Failure",
    "HeadersUnavailable",
    "Resolver",
    "UpstreamEvent",
    "UpstreamEventKind",
    "UpstreamMessage",
    "UpstreamReader",
    "UpstreamStats",
    "connect_upstream",
    "describe_close",
    "describe_connect_error",
    "with_resume_param",
]
