"""What a worker's upstream connections put on the wire per received message, from the kernel's
own counters for its sockets (``ss -ti``: ``segs_out``, ``bytes_sent``, ``segs_in``,
``bytes_received`` of each established connection to the upstream's port).

A worker that only receives still sends: TCP acknowledgements (a segment of headers alone),
WebSocket pongs and, where the feed needs one, its own messages. In public networking those
segments are data transfer out of AWS; in private networking both directions cross a NAT
gateway, each segment with its IP and TCP headers.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Final

from bench.worker_scale import FlushTail
from local.worker_process import WorkerProcess

HEADER_BYTES: Final = 52
"""IPv4 (20) + TCP (20) + the timestamp option (12) Linux puts on every segment: what a segment
adds on the wire beyond its payload (Ethernet framing is not billed)."""
_FIELDS: Final = ("segs_out", "bytes_sent", "segs_in", "bytes_received")


@dataclass(frozen=True)
class SocketCounters:
    """The sums of the kernel's counters over the connections seen."""

    connections: int
    segs_out: int
    bytes_sent: int
    segs_in: int
    bytes_received: int


@dataclass(frozen=True)
class Wire:
    """Per received message, over a window: segments and bytes (payload + headers) each way."""

    messages: int
    connections: int
    segments_out: float
    bytes_out: float
    """What the worker's sockets send per message, headers included: data transfer out."""
    segments_in: float
    bytes_in: float
    """What they receive per message, headers and WebSocket framing included (no TLS)."""


def upstream_counters(port: int) -> SocketCounters:
    """The counters of every established TCP connection to ``port`` on this machine (the
    client side: destination port ``port``). Raises ``RuntimeError`` if ``ss`` fails."""
    out = subprocess.run(
        ["ss", "-tinH", "state", "established", "dport", "=", f":{port}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"ss failed: {out.stderr.strip()}")
    return parse_ss(out.stdout)


def parse_ss(text: str) -> SocketCounters:
    """Sum ``segs_out``, ``bytes_sent``, ``segs_in`` and ``bytes_received`` over the
    connections of ``ss -tinH`` output (each connection's info line holds them; a counter a
    connection has not used is absent and counts 0)."""
    sums = dict.fromkeys(_FIELDS, 0)
    connections = 0
    for line in text.splitlines():
        if "segs_in:" not in line and "bytes_received:" not in line:
            continue
        connections += 1
        for name in _FIELDS:
            found = re.search(rf"\b{name}:(\d+)", line)
            if found:
                sums[name] += int(found.group(1))
    return SocketCounters(connections, **sums)


def measure_wire(worker: WorkerProcess, port: int, flushes: int = 3) -> Wire:
    """The worker's upstream sockets over ``flushes`` metrics flushes: counters read right after
    one flush and right after the last, messages from those flushes' ``MessagesReceived``.
    Raises ``RuntimeError`` when no flush comes within a minute."""
    tail = FlushTail(worker.log_path)
    tail.new()
    _next_flush(tail, worker)
    before = upstream_counters(port)
    messages = 0
    for _ in range(flushes):
        messages += sum(r["counters"]["MessagesReceived"] for r in _next_flush(tail, worker))
    after = upstream_counters(port)
    if messages == 0:
        raise RuntimeError("the worker received no message in the socket window")
    segs_out = after.segs_out - before.segs_out
    segs_in = after.segs_in - before.segs_in
    return Wire(
        messages=messages,
        connections=after.connections,
        segments_out=segs_out / messages,
        bytes_out=(after.bytes_sent - before.bytes_sent + segs_out * HEADER_BYTES) / messages,
        segments_in=segs_in / messages,
        bytes_in=(after.bytes_received - before.bytes_received + segs_in * HEADER_BYTES) / messages,
    )


def _next_flush(tail: FlushTail, worker: WorkerProcess) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and worker.alive:
        records = tail.new()
        if records:
            return records
        time.sleep(0.05)
    raise RuntimeError("no metrics flush from the worker within a minute")
