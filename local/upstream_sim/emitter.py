"""Sending: one :class:`Emitter` per connection, one :class:`Pacer` for every paced connection.

A thousand streams at 10 msg/s would be ten thousand task wake-ups a second if every connection
slept on its own timer; the pacer keeps one heap of due times and one task instead, and writes
each due burst straight to the connection's transport as pre-built frames.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import threading
import time
import zlib
from typing import Final

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from local.upstream_sim.knobs import Knobs, StreamStats, end_plan
from local.upstream_sim.payloads import (
    GARBAGE_FRAMES,
    PAD_CHARACTER,
    SEQ_FIELD,
    binary_frame,
    binary_payload_for,
    mix,
    text_frame,
    text_message,
)

MAX_BURST: Final = 256
"""Most frames written at once (catching up, or a flat-out stream)."""
_MIN_TICK_SECONDS: Final = 0.002  # fast streams get bursts rather than a wake-up every 100 µs
_BACKLOG_BYTES: Final = 1 << 20  # a client this far behind gets nothing until it reads


class Emitter:
    """The sending state of one connection: next seq, messages sent, when the next is due."""

    def __init__(
        self,
        ws: ServerConnection,
        stream_id: str,
        knobs: Knobs,
        stats: StreamStats,
        lock: threading.Lock,
        now: float,
    ) -> None:
        self.ws = ws
        self.knobs = knobs
        self.seq = max(knobs.first_seq, knobs.from_seq - knobs.replay_back)
        self.sent = 0
        self.started = now
        self.limit, self.end_code = end_plan(knobs)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stats = stats
        self._lock = lock
        self._stream_id = stream_id
        self._data_prefix = json.dumps(stream_id + ":").encode()[:-1]  # '"<id>:' left open
        self._stream_hash = zlib.crc32(stream_id.encode())
        # The default layout is formatted inline: it is what benchmarks push by the million.
        self._default_layout = not (knobs.binary or knobs.noseq or knobs.seq_field != SEQ_FIELD)
        self._filler = PAD_CHARACTER * knobs.pad

    @property
    def open(self) -> bool:
        """Data frames may still be sent: no close frame sent or received, transport up."""
        return self.ws.state is State.OPEN and not self.ws.transport.is_closing()

    @property
    def limit_reached(self) -> bool:
        """The connection is to be dropped or closed now (``drop_after``/``close_after``)."""
        return self.limit is not None and self.sent >= self.limit

    @property
    def exhausted(self) -> bool:
        """Everything up to ``until_seq`` was sent; the connection idles until closed."""
        return self.knobs.until_seq is not None and self.seq > self.knobs.until_seq

    @property
    def next_due(self) -> float:
        """Loop time at which the next message is due (paced streams only)."""
        return self.started + self.sent / self.knobs.rate

    def due(self, now: float) -> int:
        """How many messages to send now: what is due, within the burst and end limits."""
        knobs = self.knobs
        count = MAX_BURST
        if knobs.rate > 0:
            count = min(count, int((now - self.started) * knobs.rate) + 1 - self.sent)
        if self.limit is not None:
            count = min(count, self.limit - self.sent)
        if knobs.until_seq is not None:
            count = min(count, knobs.until_seq - self.seq + 1)
        return count

    def send(self, count: int) -> None:
        """Write ``count`` messages (plus any garbage frames due) in one transport write."""
        if count <= 0:
            return
        knobs = self.knobs
        gap_every, garbage_every = knobs.gap_every or 0, knobs.garbage_every or 0
        ts = time.time_ns() // 1_000_000
        seq, sent, prefix, stream_hash = self.seq, self.sent, self._data_prefix, self._stream_hash
        default_layout, filler = self._default_layout, self._filler
        frames = []
        for _ in range(count):
            if default_layout:
                body = b'{"seq":%d,"ts":%d,"data":%s%d:%08x%s"}' % (
                    seq,
                    ts,
                    prefix,
                    seq,
                    mix(stream_hash, seq),
                    filler,
                )
                frames.append(text_frame(body))
            else:
                frames.append(self._frame(seq, ts))
            sent += 1
            seq += 2 if gap_every and sent % gap_every == 0 else 1
            if garbage_every and sent % garbage_every == 0:
                frames.append(GARBAGE_FRAMES[(sent // garbage_every) % len(GARBAGE_FRAMES)])
        self.ws.transport.write(b"".join(frames))
        self.seq, self.sent = seq, sent
        with self._lock:
            self._stats.messages_sent += count

    def _frame(self, seq: int, ts_ms: int) -> bytes:
        """Message ``seq`` in this connection's feed mode (binary, another seq field, no seq)."""
        knobs = self.knobs
        if knobs.binary:
            return binary_frame(binary_payload_for(self._stream_id, seq))
        return text_frame(
            text_message(self._stream_id, seq, ts_ms, seq_field=knobs.seq_field, noseq=knobs.noseq)
        )

    def finish(self) -> None:
        """Tell the connection's handler that sending is over."""
        if not self.done.done():
            self.done.set_result(None)


class Pacer:
    """Sends every paced connection's due messages from one task and one heap of due times."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Emitter]] = []
        self._order = itertools.count()
        self._wakeup = asyncio.Event()

    def add(self, emitter: Emitter) -> None:
        """Start pacing ``emitter``; its first message is due at once."""
        heapq.heappush(self._heap, (emitter.started, next(self._order), emitter))
        self._wakeup.set()

    async def run(self) -> None:
        """Pace until cancelled."""
        loop = asyncio.get_running_loop()
        heap = self._heap
        while True:
            if not heap:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            now = loop.time()
            delay = heap[0][0] - now
            if delay > 0:
                self._wakeup.clear()
                try:
                    async with asyncio.timeout(max(delay, _MIN_TICK_SECONDS)):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
                continue
            while heap and heap[0][0] <= now:
                _, _, emitter = heapq.heappop(heap)
                if self._step(emitter, now):
                    # Never due again in this pass: a client that is behind waits a tick.
                    due = max(emitter.next_due, now + _MIN_TICK_SECONDS)
                    heapq.heappush(heap, (due, next(self._order), emitter))

    @staticmethod
    def _step(emitter: Emitter, now: float) -> bool:
        """Send what is due; whether the emitter stays paced."""
        if emitter.done.done() or not emitter.open:
            emitter.finish()
            return False
        if emitter.ws.transport.get_write_buffer_size() < _BACKLOG_BYTES:
            try:
                emitter.send(emitter.due(now))
            except (ConnectionError, RuntimeError):  # the transport closed under us
                emitter.finish()
                return False
        if emitter.limit_reached or emitter.exhausted:
            emitter.finish()
            return False
        return True


async def send_flat_out(emitter: Emitter) -> None:
    """Send as fast as the client reads (``rate=0``), honouring TCP flow control."""
    ws = emitter.ws
    while emitter.open and not emitter.limit_reached and not emitter.exhausted:
        emitter.send(emitter.due(0.0))
        await ws.drain()  # waits only while the client is not reading
        await asyncio.sleep(0)
    emitter.finish()
