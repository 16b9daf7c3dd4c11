"""The upstream side of one held stream: batches of messages for its holder, and the
connection's state for the worker's :class:`~worker.connection_report.ConnectionReport`.

An :class:`UpstreamFeed` belongs to one :class:`~worker.holder.StreamHolder` and is read by that
holder's task alone: :meth:`UpstreamFeed.next_batch` opens the
:class:`~worker.upstream.UpstreamReader` (resuming after the lease's checkpoint) on first use and
gives back what has arrived — nothing is read while the holder writes, so a slow sink slows the
upstream (websockets' bounded buffer, then TCP) instead of growing memory. It counts what the
reader reports and notes connection-state changes (connected, retrying, rejected), with the
failure as ``last_error``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from streamlease.errors import UpstreamRejected
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

_STATES: Final = {
    UpstreamEventKind.CONNECTED: ConnectionState.CONNECTED,
    UpstreamEventKind.RETRYING: ConnectionState.RETRYING,
    UpstreamEventKind.REJECTED: ConnectionState.REJECTED,
}


class UpstreamFeed:
    """One stream's upstream messages, batch by batch, and its failures reported."""

    def __init__(
        self,
        lease: Lease,
        ctx: WorkerContext,
        *,
        on_failed: Callable[[str], None],
        on_lost: Callable[[], None],
        on_ended: Callable[[str], None],
    ) -> None:
        """``on_failed(detail)``: the feed broke unexpectedly; ``on_lost()``: writing the
        connection state showed the lease is no longer ours; ``on_ended(detail)``: the upstream
        finished the stream (close 1000)."""
        self._lease = lease
        self._ctx = ctx
        self._on_failed = on_failed
        self._on_lost = on_lost
        self._on_ended = on_ended
        self._last_seq = lease.last_seq
        self._profile: Profile | None = None
        self._reader: UpstreamReader | None = None

    async def next_batch(self, limit: int) -> list[UpstreamMessage]:
        """The next messages (at least one, at most ``limit``), waiting for them across
        reconnects; empty when the feed is over — the upstream finished the stream
        (``on_ended``), it broke (``on_failed``), or :meth:`close` was called.

        A refused stream (``UpstreamRejected``: 4xx, a redirect, a forbidden address) stays
        held, parked, with ``last_error`` set, and is tried again every ``backoff_max_seconds``:
        handing it to another worker would only make the whole fleet knock on the same door.
        Every other failure is retried inside the reader (with its backoff). Cancelling the
        wait loses nothing: a message is either returned or still unread.
        """
        ctx = self._ctx
        while True:
            reader = self._reader
            if reader is None:
                reader = self._open()
                if reader is None:
                    return []
            try:
                batch = await reader.next_batch(limit)
            except UpstreamRejected:
                if ctx.secrets is not None and self._profile is not None:
                    ctx.secrets.forget(self._profile.secrets)  # rotated? read them afresh
                self._last_seq = reader.last_seq
                self._reader = None
                await asyncio.sleep(ctx.settings.backoff_max_seconds)
                continue
            except Exception as exc:
                self._on_failed(describe(exc))
                return []
            if batch:
                ctx.metrics.incr(WorkerMetric.MESSAGES_RECEIVED, len(batch))
            elif reader.upstream_ended:
                self._on_ended(reader.end_reason or "upstream ended the stream")
            return batch

    def _open(self) -> UpstreamReader | None:
        lease = self._lease
        profile = self._profile
        if profile is None:
            try:
                profile = self._profile = Profile.from_item(lease.profile)
            except ProfileError as exc:
                self._on_failed(f"stream profile unreadable ({exc.field})")
                return None
        self._reader = UpstreamReader(
            lease.stream_id,
            lease.ws_url,
            self._ctx.settings,
            last_seq=self._last_seq,
            on_event=self._on_event,
            profile=profile,
            headers=self._headers_for(profile),
        )
        return self._reader

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
        """Called synchronously by the reader: count, log, and note connection-state changes."""
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
        self._ctx.connections.note(self._lease, state, error, self._on_lost)


async def _static_headers(profile: Profile) -> list[tuple[str, str]]:
    """Headers without a secret resolver: literal values only."""
    if profile.secrets:
        raise UpstreamRejected("this worker cannot read secrets")
    return [(name, value.template) for name, value in profile.headers]
