"""Upstream simulator: a WebSocket server that streams numbered messages, with fault knobs and
the modes real feeds have (bearer token, subprotocol, subscribe message, own seq field, binary
frames, no seq).

By default every connection to ``/<stream id>`` receives text frames
``{"seq": n, "ts": ms, "data": ...}`` starting at ``from_seq`` (exact replay: ``data`` of seq ``n``
is :func:`payload_for` of the stream id and ``n``), at ``rate`` messages per second (``rate=0``:
as fast as the client reads).

Query options (all optional; a value that does not parse or modes that do not combine are
answered with HTTP 400), also settable per stream at run time with
:meth:`UpstreamSimulator.set_fault` for tests that cannot change a stored URL:

``rate``           messages/s (default 10; ``0`` = flat out)
``first_seq``      the feed's first seq (default 1; 0 for a feed that begins at 0): where a
                   connection starts that asks for no seq, or for one before it
``from_seq``       first seq to send (default ``first_seq``; the resume parameter, named
                   otherwise with ``UpstreamSimulator(resume_param=...)``)
``until_seq``      stop sending after this seq and keep the connection open, idle
``drop_after``     abort the TCP connection after N messages (no close frame: the client sees 1006)
``close_code``     close with this code after ``close_after`` messages
``close_after``    messages before the ``close_code`` close (default 0: right away)
``reject``         refuse the handshake with this HTTP status (300 to 599)
``garbage_every``  after every N messages also send a malformed frame (not JSON, no seq, a seq
                   beyond 2^63-1, ...)
``gap_every``      after every N messages skip one seq (the client should count gaps)
``replay_back``    start N seqs before ``from_seq`` (an upstream that replays too much)
``bearer``         require the header ``Authorization: Bearer <value>`` (scheme in any case);
                   without it, or with another value: HTTP 401 with ``WWW-Authenticate: Bearer``
``subprotocol``    require the client to offer this subprotocol (``Sec-WebSocket-Protocol``) and
                   select it; a client that does not offer it: HTTP 400
``subscribe=1``    send nothing until the client sends a text frame holding a JSON object with
                   ``"type": "subscribe"``; its integer ``"from"`` (at least 0), if present,
                   replaces ``from_seq``; other client messages are ignored (and counted).
                   ``rate``, ``drop_after``, ``close_after`` and ``until_seq`` count from the
                   subscription
``ack=1``          with ``subscribe=1``: answer the subscription with the text frame
                   ``{"type":"subscribed","from":N}`` (no seq) before the first message
``seq_field``      dotted path of the seq instead of ``seq``: ``sequence`` gives
                   ``{"sequence": n, "ts": ms, "data": ...}``; ``data.u`` gives
                   ``{"data": {"u": n, "d": ...}, "ts": ms}`` (not ``ts``, ``data``, ``data.d``)
``binary=1``       binary frames, each :func:`binary_payload_for` of the stream id and seq
                   (8-byte big-endian seq, ``\\xff\\xfe``, UTF-8 of :func:`payload_for`); not with
                   ``seq_field`` or ``noseq``
``noseq=1``        text frames ``{"ts": ms, "data": ...}`` with no seq; ``data`` is still
                   :func:`payload_for` of the message number ``n`` (counting from ``from_seq``)

Where the payload lands: ``data`` in every text mode except a ``seq_field`` under ``data``, where
it is ``data.d`` (:func:`payload_path` says which); the whole frame in ``binary=1``. ``first_seq``,
``from_seq``, ``until_seq``, ``gap_every`` and ``replay_back`` work in every mode. Unknown
parameters (a ``token=...`` credential in the query, say) are left to the URL. The ``bearer``
value is never logged nor kept in stats; :class:`StreamStats` counts ``auth_failures``,
``subprotocol_failures`` and ``ignored_messages``, and lists the ``subprotocols`` selected and
the ``subscriptions`` (where each asked to start).

Three ways to run it: ``python -m local.upstream_sim --port 8765`` (foreground until SIGINT or
SIGTERM), :func:`run_in_thread` from synchronous tests, ``async with UpstreamSimulator()`` inside
an event loop.
The simulator writes pre-built frames straight to the transport so it can out-run any client.
"""

from local.upstream_sim.knobs import ALL_STREAMS, DEFAULT_RATE, Knobs, StreamStats
from local.upstream_sim.payloads import (
    binary_payload_for,
    payload_for,
    payload_path,
    subscription_start,
    text_message,
)
from local.upstream_sim.server import LISTEN_BACKLOG, UpstreamSimulator
from local.upstream_sim.thread import run_in_thread

__all__ = [
    "ALL_STREAMS",
    "DEFAULT_RATE",
    "LISTEN_BACKLOG",
    "Knobs",
    "StreamStats",
    "UpstreamSimulator",
    "binary_payload_for",
    "payload_for",
    "payload_path",
    "run_in_thread",
    "subscription_start",
    "text_message",
]
