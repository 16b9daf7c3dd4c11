"""One held stream: its lease, its upstream link, its delivery, and how the holding ends.

A :class:`StreamHolder` is created by :mod:`worker.ownership.acquisition` after a won acquire. Its
parts: the upstream link (:mod:`worker.stream.link`: connect, resume, reconnect with backoff), whose
connections hand every batch straight to the holding's delivery (:mod:`worker.stream.delivery`:
sequence, fence check, sink, acknowledgement — callbacks, no await per message), and the
progress the connection-state writer watches (:mod:`worker.stream.progress`).

The holder's one task (:meth:`StreamHolder.run`) keeps the link up until an end is requested or
the upstream ends the stream, then takes the last steps its :class:`EndReason` calls for. Past a
per-stream lease's deadline (a timer, or a batch that finds it passed) the holding ends
(FENCED); a session's deadline pauses delivery in the worker's delivery gate instead, and a lost
session ends every holder (LOST). An end request from another task (stop, shed, shutdown, lost)
interrupts the link at once; a batch in the sink is never recalled, and after an abrupt end
nothing more is submitted. No lease is given up (released, or freed for a handover) while a
batch of its holding may still be sent: the batch is closed to every send not begun and
settled first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from typing import Any, Final, TypeVar

from streamlease import rules
from streamlease.errors import UpstreamRejected
from streamlease.lease_events import LeaseEventKind
from streamlease.model import Lease, Stream
from streamlease.profile import DEFAULT_PROFILE, Profile, ProfileError
from streamlease.schema import ConnectionState
from streamlease.telemetry import SpanName, WorkerMetric
from worker.context import WorkerContext
from worker.fencing.fence import Fence
from worker.logs import describe, logger
from worker.ownership.end_reason import GRACEFUL, PRIORITY, EndReason
from worker.ownership.holding_end import HoldingEnd
from worker.secrets import Secrets
from worker.sinks import BatchHeader
from worker.stream.delivery import Delivery
from worker.stream.link import SecretsSource, UpstreamEvent, UpstreamEventKind, UpstreamLink
from worker.stream.progress import ProgressWatch
from worker.stream.sequence import Sequencer
from worker.tracing import UNTRACED, StreamTrace

_T = TypeVar("_T")

DRAIN_SECONDS: Final = 10.0
"""How long a graceful end waits for the sink to take what was received (bounded by the
deadline too: the sink sends nothing after it). A batch still in the sink then is closed and
settled before the release (:meth:`StreamHolder._settle_sink`)."""

_LINK_STATES: Final = {
    UpstreamEventKind.CONNECTED: ConnectionState.CONNECTED,
    UpstreamEventKind.RETRYING: ConnectionState.RETRYING,
    UpstreamEventKind.REJECTED: ConnectionState.REJECTED,
}


class StreamHolder(HoldingEnd):
    """Holds one stream under one lease epoch until :meth:`request_end` (or, for a per-stream
    lease, its deadline)."""

    __slots__ = (
        "_ctx",
        "_deadline_timer",
        "_failure",
        "_interruptible",
        "_interrupting",
        "_link",
        "_sequencer",
        "_settings",
        "_task",
        "_trace",
        "acquired_mono",
        "delivery",
        "epoch",
        "fence",
        "generation",
        "lease",
        "owner",
        "progress",
        "stream_id",
    )

    def __init__(
        self, lease: Lease, ctx: WorkerContext, fence: Fence, *, acquired_mono: float
    ) -> None:
        """``fence``: the deadline given by the acquire and whatever moves it."""
        self.lease = lease
        self.stream_id = lease.stream_id
        self.epoch = lease.epoch
        self.owner = lease.owner
        self.acquired_mono = acquired_mono
        self.fence = fence
        self.generation = lease.generation
        """The stream's generation whose settings the link uses."""
        self.end_reason: EndReason | None = None
        self._ctx = ctx
        self._settings = ctx.settings
        self._failure: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._interruptible = False
        self._interrupting = False
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._trace = UNTRACED
        profile = self._profile(lease.profile)
        sequencer = self._sequencer = Sequencer(profile.seq_path, lease.last_seq, profile.control)
        self.progress = ProgressWatch(sequencer, profile.idle_seconds)
        self.delivery = Delivery(
            BatchHeader(lease.stream_id, lease.epoch, lease.owner),
            self.progress,
            fence,
            sink=ctx.sink,
            metrics=ctx.metrics,
            gate=ctx.gate,
            reading=self,
            on_fenced=self._fenced,
            acked_seq=lease.last_seq,
        )
        secrets = ctx.secrets
        self._link = UpstreamLink(
            lease.stream_id,
            lease.ws_url,
            ctx.settings,
            self.delivery.messages_received,  # the connection's batches go straight there
            resume_from=self._resume_from,
            on_event=self._on_event,
            profile=profile,
            secrets=_secrets_for(profile, secrets),
            forget_secrets=_forget_for(profile, secrets),
            keepalive=ctx.keepalive,
            connect_span=self._connect_span,
        )

    def _profile(self, stored: Mapping[str, Any] | None) -> Profile:
        try:
            return Profile.from_item(stored)
        except ProfileError as exc:
            self._failure = f"stream profile unreadable ({exc.field})"
            return DEFAULT_PROFILE

    def change(self, stream: Stream) -> bool:
        """The stream's URL or profile was changed in place (``stream``: as read after the
        change): from now on the link, the sequencer and the idle threshold use the new
        settings, and the link reconnects with them at once from where the stream got — the
        same holding, epoch and delivery; nothing is released. Returns False (and changes
        nothing) when ``stream`` is not newer than what the holder uses, or the holding ends.
        """
        if stream.generation <= self.generation or not self.is_active:
            return False
        self.generation = stream.generation
        profile = self._profile(stream.profile)
        if self._failure is not None:
            self.request_end(EndReason.FAILED)
            return False
        sequencer = self._sequencer
        sequencer.seq_path = profile.seq_path
        sequencer.control_conditions = profile.control
        self.progress.idle_seconds = profile.idle_seconds
        secrets = self._ctx.secrets
        self._link.change(
            stream.ws_url, profile, _secrets_for(profile, secrets), _forget_for(profile, secrets)
        )
        self._record(LeaseEventKind.CHANGED)
        logger.info(
            "stream settings changed",
            stream_id=self.stream_id,
            epoch=self.epoch,
            generation=stream.generation,
        )
        return True

    # --- what other tasks call -----------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """True until an end was requested."""
        return self.end_reason is None

    @property
    def trace(self) -> StreamTrace:
        """This start's place in a trace (set by the acquire): its first batch is recorded."""
        return self._trace

    @trace.setter
    def trace(self, trace: StreamTrace) -> None:
        self._trace = trace
        self.delivery.on_first_stored = trace.first_batch if trace.traced else None

    @property
    def buffered_bytes(self) -> int:
        """Payload bytes received and not yet acknowledged by the sink (in it, or waiting)."""
        return self.delivery.buffered_bytes

    def pause_reading(self) -> None:
        """Read nothing from the upstream until :meth:`resume_reading` (the delivery asks)."""
        self._link.pause_reading()

    def resume_reading(self) -> None:
        """Read again."""
        self._link.resume_reading()

    def request_end(self, reason: EndReason, detail: str | None = None) -> None:
        """Ask the holder to end for ``reason`` (see
        :data:`~worker.ownership.end_reason.PRIORITY` for concurrent asks): reading stops and
        the link is interrupted now; a batch in the sink finishes."""
        current = self.end_reason
        if current is not None and PRIORITY[reason] <= PRIORITY[current]:
            return
        self.end_reason = reason
        if reason in (EndReason.FAILED, EndReason.ENDED) and detail:
            self._failure = detail
        self.delivery.stop(graceful=reason in GRACEFUL)
        self._interrupt()

    def extend(self, sent_mono: float) -> float | None:
        """A renewal of a per-stream lease sent at ``sent_mono`` succeeded: move the deadline.

        Returns the deadline now in force, or None when the holder no longer delivers (lost,
        fenced, or the answer came back after the deadline it would set: a renewal whose reply
        was delayed past it revives nothing).
        """
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return None
        return self.fence.extend(sent_mono)

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Hold the stream until it ends, then take the last steps its end reason calls for.

        Graceful (stopped, shed, shutdown, ended, failed): stop reading, let the sink take what
        was received, close the upstream (1000 or 1001), release with the final checkpoint
        (the last acknowledged seq) and progress, then hand off. Abrupt (lost, fenced): deliver
        nothing more, record the event, close the upstream.
        """
        self._task = asyncio.current_task()
        self._arm_deadline()
        self._ctx.connections.track(self.lease, self.progress, self._lost)
        try:
            if self._failure is not None:
                self.request_end(EndReason.FAILED)
            # Keep the link up until an end is requested or the upstream ends it (here, not in a
            # coroutine of its own: every held stream waits in this chain of frames).
            link = self._link
            try:
                await self._interruptibly(link.run())
            except Exception as exc:
                self.request_end(EndReason.FAILED, describe(exc))
            else:
                if link.upstream_ended:
                    why = link.end_reason or "upstream ended the stream"
                    self.request_end(EndReason.ENDED, why)
            reason = self.end_reason
            if reason in GRACEFUL:
                limit = min(DRAIN_SECONDS, max(0.0, self.fence.remaining_seconds()) + 1.0)
                await self.delivery.drain(limit)
                code = 1000 if reason in (EndReason.STOPPED, EndReason.ENDED) else 1001
                await self._link.close(code)
                await self._settle_sink()
                await self._give_back()
            else:
                self._record_abrupt_end()
                await self._link.close(1001)
                if reason is EndReason.FENCED:
                    await self._settle_sink()
                    await self._release_lapsed()
        except Exception as exc:  # a bug must not take the worker down
            logger.exception(
                "holder failed", stream_id=self.stream_id, epoch=self.epoch, error=describe(exc)
            )
            self.fence.stop_renewing()
            await self._link.close(1001)
            await self._settle_sink()
            await self._release_lapsed()  # conditional on owner and epoch: safe in any state
        finally:
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
            self.delivery.close()
            self._ctx.connections.forget(self.stream_id, self.epoch)
            self.fence.finish()

    # Callbacks as methods, not lambdas: every held stream has them (a bound method is a third
    # of a closure's size, and is made once, when handed over).

    def _lost(self) -> None:
        self.request_end(EndReason.LOST)

    def _fenced(self) -> None:
        self.request_end(EndReason.FENCED)

    def _resume_from(self) -> int:
        return self._sequencer.last_seq

    def _connect_span(self, attempt: int) -> AbstractContextManager[object]:
        return self._trace.span(SpanName.CONNECT, attempt=attempt)

    def _on_event(self, event: UpstreamEvent) -> None:
        """The link's report: count, log, and note connection-state changes."""
        kind = event.kind
        stream_id = self.stream_id
        if kind is UpstreamEventKind.CONNECTED:
            logger.info("upstream connected", stream_id=stream_id, attempt=event.attempt)
        else:
            if kind is UpstreamEventKind.RETRYING:
                self._ctx.metrics.incr(WorkerMetric.RECONNECTS)
            logger.info(
                "upstream failed",
                stream_id=stream_id,
                kind=kind.value,
                error=event.error,
                status=event.status,
                close_code=event.close_code,
                retry_in_seconds=round(event.delay_seconds, 3),
            )
        state = _LINK_STATES.get(kind)
        if state is not None:
            error = None if state is ConnectionState.CONNECTED else event.error
            self._ctx.connections.note(self.lease, state, error, self._lost)

    async def _interruptibly(self, step: Coroutine[Any, Any, _T]) -> _T | None:
        """Await ``step`` unless an end request interrupts it first (then None).

        The interruption is a cancellation of this very task that :meth:`request_end` sends
        only while a step is in progress, and that is taken back here; a cancellation from
        anyone else (the worker giving up at the end of its shutdown budget) goes on.
        """
        if self.end_reason is not None:
            step.close()
            return None
        self._interrupting = False
        task = self._task
        assert task is not None
        self._interruptible = True
        try:
            result = await step
        except asyncio.CancelledError:
            if self._interrupting and task.cancelling() == 1:
                task.uncancel()
                return None
            raise
        finally:
            self._interruptible = False
        if self._interrupting:  # the step swallowed the interruption: take it back all the same
            task.uncancel()
            return None
        return result

    def _interrupt(self) -> None:
        task = self._task
        if (
            self._interruptible
            and not self._interrupting
            and task is not None
            and asyncio.current_task() is not task  # from inside the step: it is ending anyway
        ):
            self._interrupting = True
            task.cancel()

    def _arm_deadline(self) -> None:
        """Per-stream leases: a timer requests FENCED when the deadline passes unrenewed."""
        if self.fence.pauses:
            return
        loop = asyncio.get_running_loop()
        # time.monotonic and the loop's clock are the same clock on Linux (CLOCK_MONOTONIC).
        self._deadline_timer = loop.call_at(
            loop.time() + (self.deadline_mono - time.monotonic()), self._deadline_passed
        )

    def _deadline_passed(self) -> None:
        if self.end_reason is not None and self.end_reason not in GRACEFUL:
            return
        if rules.is_safe_to_deliver(time.monotonic(), self.deadline_mono):
            self._arm_deadline()  # renewed meanwhile: wait for the new deadline
            return
        self.request_end(EndReason.FENCED)


def _secrets_for(profile: Profile, secrets: Secrets | None) -> SecretsSource | None:
    """What the link calls before each connect for the values of the profile's secrets."""
    refs = profile.secrets
    if not refs:
        return None
    if secrets is None:
        return _no_secrets
    return lambda: secrets.resolve(refs)


def _forget_for(profile: Profile, secrets: Secrets | None) -> Callable[[], None] | None:
    """What the link calls when the upstream refused the stream: read its secrets afresh
    (None: the profile has none)."""
    if secrets is None or not profile.secrets:
        return None
    return lambda: secrets.forget(profile.secrets)


async def _no_secrets() -> dict[str, str]:
    raise UpstreamRejected("this worker cannot read secrets")
