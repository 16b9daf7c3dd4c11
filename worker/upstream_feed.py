"""The upstream side of one held stream: reader → bounded queue, and the connection's state →
the stream item.

An :class:`UpstreamFeed` belongs to one :class:`~worker.holder.StreamHolder`. It opens a
:class:`~worker.upstream.UpstreamReader` resuming after the lease's checkpoint, puts messages on
the holder's bounded queue (a slow sink slows reading, never grows memory), counts what the
reader reports, and writes the connection state (connected, retrying, rejected) into the stream
item when it changes, with the failure as ``last_error`` — changes soon, repeats rarely, never
more than one write a second, never per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from streamlease.errors import LeaseLost, StoreError, UpstreamRejected
from streamlease.model import Lease
from streamlease.profile import Profile, ProfileError
from streamlease.schema import ConnectionState
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.logs import describe, logger
from worker.upstream import (
    CLOSE_TIMEOUT_SECONDS,
    UpstreamEvent,
    UpstreamEventKind,
    UpstreamMessage,
    UpstreamReader,
)

ERROR_REPEAT_SECONDS: Final = 60.0
"""The same state with the same ``last_error`` text is written again at most this often."""
ERROR_MIN_GAP_SECONDS: Final = 1.0
"""At most one connection-state write per stream per this many seconds (a flapping upstream
coalesces into its latest state)."""

_STATES: Final = {
    UpstreamEventKind.CONNECTED: ConnectionState.CONNECTED,
    UpstreamEventKind.RETRYING: ConnectionState.RETRYING,
    UpstreamEventKind.REJECTED: ConnectionState.REJECTED,
}


class UpstreamFeed:
    """Reads one stream's upstream into a queue and reports its failures."""

    def __init__(
        self,
        lease: Lease,
        ctx: WorkerContext,
        queue: asyncio.Queue[UpstreamMessage | None],
        *,
        on_failed: Callable[[str], None],
        on_lost: Callable[[], None],
        on_ended: Callable[[str], None],
        fenced: Callable[[], bool] | None = None,
        until_renewed: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """``on_failed(detail)``: the feed broke unexpectedly; ``on_lost()``: writing
        ``last_error`` showed the lease is no longer ours; ``on_ended(detail)``: the upstream
        finished the stream (close 1000). ``fenced()`` / ``until_renewed()`` (a session's
        holder): while delivery is paused past the deadline, no message is taken in —
        ``until_renewed()`` waits, and says False when delivery is over for good."""
        self._lease = lease
        self._ctx = ctx
        self._queue = queue
        self._on_failed = on_failed
        self._on_lost = on_lost
        self._on_ended = on_ended
        self._fenced = fenced
        self._until_renewed = until_renewed
        self._reader: UpstreamReader | None = None
        self._pending: tuple[ConnectionState, str | None] | None = None
        self._state_changed = asyncio.Event()

    async def receive(self) -> None:
        """Upstream → queue until cancelled or the upstream finished the stream (close 1000:
        ``on_ended``, no reconnect), reopening the reader when the upstream refused it.

        A refused stream (``UpstreamRejected``: 4xx, a redirect, a forbidden address) stays
        held, parked, with ``last_error`` set, and is tried again every ``backoff_max_seconds``:
        handing it to another worker would only make the whole fleet knock on the same door.
        Every other failure is retried inside the reader (with its backoff).

        A message that arrives while delivery is paused is taken in only once it resumes, and
        stamped then (``received_at_ms`` is when the worker took the frame in): nothing is
        accepted in a time no deadline covers, and a paused feed stops reading (backpressure).
        """
        settings = self._ctx.settings
        metrics = self._ctx.metrics
        queue = self._queue
        last_seq = self._lease.last_seq
        try:
            profile = Profile.from_item(self._lease.profile)
        except ProfileError as exc:
            self._on_failed(f"stream profile unreadable ({exc.field})")
            return
        headers = self._headers_for(profile)
        while True:
            reader = UpstreamReader(
                self._lease.stream_id,
                self._lease.ws_url,
                settings,
                last_seq=last_seq,
                on_event=self._on_event,
                profile=profile,
                headers=headers,
            )
            self._reader = reader
            fenced, until_renewed = self._fenced, self._until_renewed
            try:
                async for message in reader:
                    metrics.incr(WorkerMetric.MESSAGES_RECEIVED)
                    if fenced is not None and until_renewed is not None and fenced():
                        if not await until_renewed():
                            return
                        message = message._replace(received_at_ms=time.time_ns() // 1_000_000)
                    await queue.put(message)
            except UpstreamRejected:
                pause = settings.backoff_max_seconds
                if self._ctx.secrets is not None:
                    self._ctx.secrets.forget(profile.secrets)  # rotated? read them afresh
            except Exception as exc:
                self._on_failed(describe(exc))
                return
            else:
                if reader.upstream_ended:
                    self._on_ended(reader.end_reason or "upstream ended the stream")
                return  # ended, or closed by the holder
            last_seq = reader.last_seq
            await asyncio.sleep(pause)

    def _headers_for(
        self, profile: Profile
    ) -> Callable[[], Awaitable[Sequence[tuple[str, str]]]] | None:
        """What the reader calls before each connect for the handshake headers."""
        if not profile.headers:
            return None
        secrets = self._ctx.secrets
        if secrets is None:
            return lambda: _static_headers(profile)
        return lambda: secrets.headers(profile)

    async def close(self, code: int) -> None:
        """Close the connection with ``code`` (1000 stopped, 1001 going away); never raises."""
        reader = self._reader
        if reader is None:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS + 1.0):
                await reader.close(code)
        except Exception as exc:  # the socket is gone either way
            logger.debug(
                "upstream close failed", stream_id=self._lease.stream_id, error=describe(exc)
            )

    def _on_event(self, event: UpstreamEvent) -> None:
        """Called synchronously by the reader: count, log, and queue connection-state writes."""
        kind = event.kind
        metrics = self._ctx.metrics
        stream_id = self._lease.stream_id
        if kind is UpstreamEventKind.MALFORMED:
            metrics.incr(WorkerMetric.MALFORMED_FRAMES)
        elif kind is UpstreamEventKind.GAP:
            metrics.incr(WorkerMetric.SEQ_GAPS)
            logger.info(
                "upstream seq gap", stream_id=stream_id, seq=event.seq, missing=event.missing
            )
        elif kind is UpstreamEventKind.CONNECTED:
            logger.info("upstream connected", stream_id=stream_id, attempt=event.attempt)
            self._note(ConnectionState.CONNECTED, None)
        else:
            if kind is UpstreamEventKind.RETRYING:
                metrics.incr(WorkerMetric.RECONNECTS)
            logger.info(
                "upstream failed",
                stream_id=stream_id,
                kind=kind.value,
                error=event.error,
                status=event.status,
                close_code=event.close_code,
                retry_in_seconds=round(event.delay_seconds, 3),
            )
            state = _STATES.get(kind)
            if state is not None:
                self._note(state, event.error)

    def _note(self, state: ConnectionState, error: str | None) -> None:
        self._pending = (state, error)
        self._state_changed.set()

    async def report_connection(self) -> None:
        """Write connection-state changes (with their error) to the stream item until
        cancelled. The acquire wrote ``connecting``."""
        last: tuple[ConnectionState, str | None] = (ConnectionState.CONNECTING, None)
        last_at = -math.inf
        lease = self._lease
        while True:
            await self._state_changed.wait()
            self._state_changed.clear()
            pending = self._pending
            now = time.monotonic()
            if pending is None or (pending == last and now - last_at < ERROR_REPEAT_SECONDS):
                continue
            state, error = pending
            with contextlib.suppress(StoreError):  # the next change tries again
                try:
                    await asyncio.to_thread(
                        self._ctx.store.record_connection,
                        lease.stream_id,
                        lease.owner,
                        lease.epoch,
                        state,
                        error,
                    )
                except LeaseLost:
                    self._on_lost()
                    return
                last, last_at = pending, now
                await asyncio.sleep(ERROR_MIN_GAP_SECONDS)


async def _static_headers(profile: Profile) -> list[tuple[str, str]]:
    """Headers without a secret resolver: literal values only."""
    if profile.secrets:
        raise UpstreamRejected("this worker cannot read secrets")
    return [(name, value.template) for name, value in profile.headers]
