"""Per-stream leases (``liveness = stream``, architecture §4b): every held lease renewed once per
heartbeat, evenly spread. (In session mode this loop holds nothing: the session renews.)

Renewal is heartbeat and checkpoint in one conditional write (``LeaseStore.renew`` with the
holder's acknowledged seq); its expiry only grows, so a renewal applied late changes nothing.
The send time is taken *before* the call: a success moves the holder's fencing deadline to send
time + lease − margin, never further. Outcomes:

- success → next renewal at the lease's next slot (:class:`RenewalSchedule`);
- no answer (``StoreError``) → retry soon, as often as needed: the holder's own timer fences it
  if the deadline passes first, whatever DynamoDB does. A fenced holder stops renewing and
  releases its lease, so nothing keeps a lease alive that nobody delivers on (a retry already
  sent may still land and lengthen it once, by at most a lease from its send time);
- ``StreamStopped`` → the holder closes with 1000 and releases (stop latency ≤ one heartbeat);
- ``LeaseLost`` → the holder stops at once and writes nothing more.

``RenewalLagMs`` is how late each renewal was *sent* compared with its due time.

A gray failure — renewals that land but whose answers never come back in time — fences every
holding of the worker while its leases look renewed to everyone else. So while a renewal has
been waiting for its answer for more than a heartbeat, or the last one to come back went
unanswered less than a lease ago, the worker takes no new streams (:meth:`Renewals.unanswered`):
its peers take the released ones instead of watching it take them back only to fence them again.
Its worker item, which may well renew meanwhile, advertises a capacity of 0
(:mod:`worker.fencing.session`), so its peers leave it out of the fair share and keep what they
took instead of shedding it back towards a worker that takes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
from typing import Final

from streamlease import rules
from streamlease.errors import LeaseLost, StreamStopped
from streamlease.lease_events import LeaseEventKind
from streamlease.lease_store import wall_ms
from streamlease.telemetry import WorkerMetric
from worker.context import WorkerContext
from worker.fencing.fence import LeaseFence
from worker.logs import describe, logger
from worker.metrics import RENEWAL_CALL_MS
from worker.ownership.end_reason import EndReason
from worker.ownership.holder import StreamHolder
from worker.ownership.renewal_schedule import RenewalSchedule

MAX_IN_FLIGHT: Final = 16
"""Renewals awaiting DynamoDB at once; one slow call never delays the others' sends."""

LeaseKey = tuple[str, int]
"""(stream id, epoch): a re-acquired stream is a different lease."""


class Renewals:
    """Tracks the held leases and runs the renewal loop (:meth:`renew_leases`)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self._ctx = ctx
        self._schedule: RenewalSchedule[LeaseKey] = RenewalSchedule(ctx.settings.heartbeat_seconds)
        self._holders: dict[LeaseKey, StreamHolder] = {}
        self._fences: dict[LeaseKey, LeaseFence] = {}
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._answered_mono = -math.inf
        self._unanswered_mono = -math.inf
        self._waiting: dict[int, float] = {}
        """Send times of the renewal calls awaiting an answer, by call."""
        self._calls = itertools.count()

    def __len__(self) -> int:
        return len(self._holders)

    def behind_seconds(self, now_mono: float | None = None) -> float:
        """How long the most overdue renewal has been due without succeeding (0: on time)."""
        oldest = self._schedule.oldest_slot()
        now = time.monotonic() if now_mono is None else now_mono
        return 0.0 if oldest is None else max(0.0, now - oldest)

    def is_behind(self, now_mono: float | None = None) -> bool:
        """True when some lease missed a whole heartbeat: DynamoDB is slow or failing, or this
        process is starved. A worker in that state takes no new streams: each one would add
        renewals to a loop that cannot keep up, and its leases would start fencing."""
        return self.behind_seconds(now_mono) > self._schedule.interval_seconds

    def unanswered(self, now_mono: float | None = None) -> bool:
        """True when a renewal has waited for its answer for more than a heartbeat, or the last
        one to come back got none, less than a lease ago (the leases it held have fenced or are
        about to: taking more would only fence them too)."""
        now = time.monotonic() if now_mono is None else now_mono
        settings = self._ctx.settings
        oldest = min(self._waiting.values(), default=now)
        if now - oldest > settings.heartbeat_seconds:
            return True
        last_failure = self._unanswered_mono
        return last_failure > self._answered_mono and now - last_failure < settings.lease_seconds

    def track(
        self, holder: StreamHolder, fence: LeaseFence, now_mono: float | None = None
    ) -> float:
        """Start renewing ``holder``'s lease (whose fence is ``fence``); returns its first due
        time (monotonic)."""
        key = (holder.stream_id, holder.epoch)
        self._holders[key] = holder
        self._fences[key] = fence
        due = self._schedule.add(key, time.monotonic() if now_mono is None else now_mono)
        self._wake.set()
        return due

    def untrack(self, stream_id: str, epoch: int) -> None:
        """Stop renewing that lease (idempotent)."""
        key = (stream_id, epoch)
        self._holders.pop(key, None)
        self._fences.pop(key, None)
        self._schedule.remove(key)

    async def renew_leases(self) -> None:
        """Send each renewal when due, forever (cancel to stop)."""
        interval = self._schedule.interval_seconds
        async with asyncio.TaskGroup() as tasks:
            while True:
                for key, due in self._schedule.pop_due(time.monotonic()):
                    holder = self._holders.get(key)
                    if holder is None:
                        continue
                    await self._slots.acquire()
                    tasks.create_task(
                        self._renew(key, holder, due),
                        name=f"renew lease {holder.stream_id} epoch {holder.epoch}",
                    )
                upcoming = self._schedule.next_due()
                delay = interval if upcoming is None else upcoming - time.monotonic()
                self._wake.clear()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(delay, interval)):
                            await self._wake.wait()

    async def _renew(self, key: LeaseKey, holder: StreamHolder, due: float) -> None:
        ctx = self._ctx
        settings = ctx.settings
        try:
            sent = time.monotonic()
            ctx.metrics.observe(WorkerMetric.RENEWAL_LAG_MS, max(0.0, sent - due) * 1000.0)
            fence = self._fences.get(key)
            if fence is None:
                return  # untracked meanwhile
            previous = fence.sent_expires_ms
            now = wall_ms()
            fence.sent_expires_ms = rules.next_session_expiry_ms(now, settings.lease_ms, previous)
            call = next(self._calls)
            self._waiting[call] = sent
            try:
                await asyncio.to_thread(
                    ctx.store.renew,
                    holder.stream_id,
                    holder.owner,
                    holder.epoch,
                    holder.acked_seq,
                    settings.lease_ms,
                    now_ms=now,
                    previous_expires_ms=previous,
                )
            except StreamStopped:
                self.untrack(*key)
                logger.info("stream stopped", stream_id=holder.stream_id, epoch=holder.epoch)
                holder.request_end(EndReason.STOPPED)
                return
            except LeaseLost as exc:
                self.untrack(*key)
                logger.warning(
                    "renewal refused",
                    stream_id=holder.stream_id,
                    epoch=holder.epoch,
                    reason=exc.reason,
                )
                holder.request_end(EndReason.LOST)
                return
            except Exception as exc:  # StoreError, or a bug in a dependency: retry soon
                self._unanswered_mono = time.monotonic()
                self._retry(key, holder, exc)
                return
            finally:
                del self._waiting[call]
                ctx.metrics.observe(RENEWAL_CALL_MS, (time.monotonic() - sent) * 1000.0)
            self._answered_mono = time.monotonic()
            deadline = holder.extend(sent)
            if key not in self._holders:
                return
            self._schedule.succeeded(key, time.monotonic())
            if deadline is None:
                return  # answered too late to count; the holder's own timer fences it
            ctx.events.record(
                LeaseEventKind.RENEWED,
                holder.stream_id,
                holder.epoch,
                deadline_mono=deadline,
                worker_id=holder.owner,
            )
        finally:
            self._slots.release()

    def _retry(self, key: LeaseKey, holder: StreamHolder, exc: Exception) -> None:
        logger.debug(
            "renewal unanswered",
            stream_id=holder.stream_id,
            epoch=holder.epoch,
            error=describe(exc),
        )
        delay = rules.retry_delay_seconds(self._ctx.settings.heartbeat_seconds, random.random())
        self._schedule.retry(key, time.monotonic() + delay)
        self._wake.set()
