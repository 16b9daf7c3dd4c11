"""Upstream simulator: a WebSocket server that streams numbered JSON messages, with fault knobs.

Every connection to ``/<stream id>`` receives text frames ``{"seq": n, "ts": ms, "data": ...}``
starting at ``from_seq`` (exact replay: ``data`` of seq ``n`` is :func:`payload_for` of the stream
id and ``n``), at ``rate`` messages per second (``rate=0``: as fast as the client reads).

Query knobs (all optional), also settable per stream at run time with
:meth:`UpstreamSimulator.set_fault` for tests that cannot change a stored URL:

``rate``           messages/s (default 10; ``0`` = flat out)
``from_seq``       first seq to send (default 1; the resume parameter)
``until_seq``      stop sending after this seq and keep the connection open, idle
``drop_after``     abort the TCP connection after N messages (no close frame: the client sees 1006)
``close_code``     close with this code after ``close_after`` messages (default 0)
``reject``         refuse the handshake with this HTTP status (403, 503, ...)
``garbage_every``  after every N messages also send a malformed frame (not JSON, no seq, ...)
``gap_every``      after every N messages skip one seq (the client should count gaps)
``replay_back``    start N seqs before ``from_seq`` (an upstream that replays too much)

Three ways to run it: ``python -m local.upstream_sim --port 8765`` (foreground until SIGINT or
SIGTERM), :func:`run_in_thread` from synchronous tests, ``async with UpstreamSimulator()`` inside
an event loop.
The simulator writes pre-built frames straight to the transport so it can out-run any client.
"""

from local.upstream_sim.knobs import ALL_STREAMS, DEFAULT_RATE, Knobs, StreamStats, payload_for
from local.upstream_sim.server import LISTEN_BACKLOG, UpstreamSimulator, raise_open_file_limit
from local.upstream_sim.thread import run_in_thread

__all__ = [
    "ALL_STREAMS",
    "DEFAULT_RATE",
    "LISTEN_BACKLOG",
    "Knobs",
    "StreamStats",
    "UpstreamSimulator",
    "payload_for",
    "raise_open_file_limit",
    "run_in_thread",
]
