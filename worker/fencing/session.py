"""This worker's session: its worker item, renewed by a thread of its own, and one fencing
deadline for every stream attached to it (architecture §4a).

The worker item ``WORKER#<id>`` is created at start-up and renewed every heartbeat by one
conditional write (:meth:`SessionStore.renew`) that carries the checkpoint vector of the held
streams (:class:`~worker.fencing.slots.SlotTable`). The renewal runs in a dedicated thread with its
own DynamoDB client (no botocore retries, the short DynamoDB timeout), so a busy event loop cannot
delay it: like aiokafka's heartbeat, the time is taken *before* the request, the next one goes
one heartbeat after the last send, and an unanswered one is retried soon.

**Self-fencing.** The deadline is ``send time of the last successful renewal + lease − margin``
(monotonic). Past it no holder starts a sink write and nothing new is acquired; renewals go on.
If one succeeds, nobody can have taken anything (a peer's tombstone needs ``hb`` unchanged for a
whole lease): delivery resumes. If the store says the session is EXPIRED or gone, every stream
is lost: the worker writes nothing more under this id and starts a new session.

**Gray failure.** Peers judge a session by its ``hb`` moving on the server; the worker judges it
by the answers it receives. When renewals land but their answers do not come back in time, the
session looks alive to everyone but its own worker, whose streams stay paused. So when a renewal
goes unanswered past the deadline (about a lease after the last success; a worker that was
merely frozen tries a renewal first), the thread reads the session item. If the store answers
that read and a renewal sent after it still goes unanswered, the renewals are what fails (a
renewal answered then means the store was slow for everyone, a brownout just ended: renewing
goes on): the thread stops renewing and *revokes* the session
(``state = EXPIRED`` on condition it is live; a renewal still on its way lands on a tombstone
and changes nothing, since EXPIRED never renews), retrying the revoke until it is answered, and
the worker hands the streams over (:mod:`worker.liveness.session_keeper`). Neither happens inside
the fence margin after the deadline while a sink call begun before it may still be under way:
delivery stops at once, the tombstone waits for the margin, the handover for the margin or the
sink, whichever is first. If the read is not
answered either, the store is out of reach (or sick for everyone, when no peer could take anything):
renewals go on, and the worker gives up only after
:data:`~streamlease.rules.UNREACHABLE_LEASES` leases. The next session of a worker whose
session was lost is on *probation*: it takes no streams and judges no peer until one of its own
renewals succeeded.

The thread never touches worker state directly: it hands each outcome to the event loop, which
publishes the new deadline and records the lease event in the same step, so what holders obey
and what the event log shows are one and the same.

In per-stream mode (``liveness = stream``) the same session is the worker item's heartbeat:
it carries no vector and fences nothing (each lease has its own deadline). While the worker's
lease renewals go unanswered it takes no streams, and its renewals say so: they advertise a
capacity of 0, so its peers leave it out of the fair share (architecture §4b).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from streamlease import rules
from streamlease.errors import SessionExpired
from streamlease.lease_events import LeaseEventKind
from streamlease.lease_store import wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import Liveness, WorkerState
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from streamlease.telemetry import WorkerMetric
from worker.fencing.slots import SlotTable
from worker.identity import Identity
from worker.lease_event_log import LeaseEventLog
from worker.logs import describe, logger
from worker.metrics import RENEWAL_CALL_MS


class SessionState(StrEnum):
    """Where a session is in its life, as this worker knows it."""

    LIVE = "live"
    EXPIRED = "expired"
    """The store refused a renewal: tombstoned or gone. Nothing more is written under it."""
    REVOKED = "revoked"
    """Given up by this worker: no renewal was answered for a lease (revoked in the store by
    the renewal thread), or the worker gives up altogether. Nothing more is written under it."""
    ENDED = "ended"
    """This worker revoked it itself (after its drain)."""


class Session:
    """One session of this worker: id, slots, deadline, and the thread that renews it.

    Create with :meth:`open` (writes the item), then :meth:`start` the renewal thread; the event
    loop reads :attr:`deadline_mono` and waits on :meth:`wait_renewed`. ``on_expired`` is called
    in the event loop when the store says the session is gone.
    """

    def __init__(
        self,
        worker_id: str,
        settings: Settings,
        identity: Identity,
        store: SessionStore,
        renewal_store: SessionStore,
        events: LeaseEventLog,
        *,
        on_expired: Callable[[Session], None],
        active_streams: Callable[[], int],
        observe: Callable[[str, float], None] | None = None,
        probation: bool = False,
        count: Callable[[str], None] | None = None,
        leases_unanswered: Callable[[], bool] | None = None,
        load_figures: Callable[[], tuple[int | None, int | None]] | None = None,
    ) -> None:
        """``store``: for the loop's own writes; ``renewal_store``: on the renewal thread's
        client. ``active_streams()`` is read by the loop only (the thread gets a copy).
        ``observe(metric, ms)`` records each renewal's lag and round trip (called in the loop);
        ``count(metric)`` counts a lost checkpoint slot. ``probation``: not :meth:`healthy`
        until a renewal succeeded (a worker that lost its previous session proves its renewals
        get through before it takes streams again). ``leases_unanswered()`` (per-stream mode,
        read by the loop only): True while the worker's lease renewals go unanswered; the
        renewals then advertise a capacity of 0. ``load_figures()`` (read by the loop only):
        the worker's load and CPU use in thousandths (:mod:`worker.ownership.load_meter`),
        carried by the next renewal."""
        self.worker_id = worker_id
        self.settings = settings
        self.state = SessionState.LIVE
        self.slots = SlotTable(2 * settings.capacity)
        self.carries_checkpoints = settings.liveness is Liveness.SESSION
        self._identity = identity
        self._store = store
        self._renewal_store = renewal_store
        self._events = events
        self._on_expired = on_expired
        self._active_streams = active_streams
        self._observe = observe
        self._count = count
        self._leases_unanswered = leases_unanswered
        self._withholding = False
        """True while the renewals advertise no capacity (lease renewals unanswered)."""
        self._active_copy = 0
        self._capacity_copy = settings.capacity
        self._load_figures = load_figures
        self._load_copy: tuple[int | None, int | None] = (None, None)
        self.retiring = False
        """True once this session is being replaced by a fresh one (too many slots lost): it
        takes no more streams and hands off those it holds."""
        self.started_at_ms = wall_ms()
        self.created_mono = 0.0
        self.deadline_mono = 0.0
        """Until when holders may deliver (monotonic; published by the loop)."""
        self.last_success_sent_mono = 0.0
        """Send time of the last renewal that succeeded (or of the create)."""
        self.last_renewed_mono = 0.0
        """Send time of the last renewal that succeeded (0: none yet; the create not counted)."""
        self.probation = probation
        self._last_sent_expiry_ms = 0
        self._renewed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._fenced_logged = False

    # --- life ------------------------------------------------------------------------------

    def info(self, state: WorkerState = WorkerState.RUNNING) -> WorkerInfo:
        """The item as created."""
        identity = self._identity
        now = wall_ms()
        expires = rules.next_session_expiry_ms(now, self.settings.lease_ms, 0)
        return WorkerInfo(
            worker_id=self.worker_id,
            state=state,
            heartbeat_at_ms=now,
            expires_at_ms=expires,
            active_streams=0,
            capacity=self.settings.capacity,
            host=identity.host,
            pid=identity.pid,
            task_arn=identity.task_arn,
            version=identity.version,
            started_at_ms=self.started_at_ms,
            hb=0,
            liveness=self.settings.liveness,
            checkpoints=self.slots.vector() if self.carries_checkpoints else None,
        )

    async def open(self) -> None:
        """Create the worker item; the session is live (its deadline runs) from the moment the
        create was sent. Raises :class:`StoreError` / :class:`SessionExpired`."""
        info = self.info()
        sent = time.monotonic()
        await asyncio.to_thread(self._store.create, info)
        self._last_sent_expiry_ms = info.expires_at_ms
        self.created_mono = sent
        self._publish(sent)

    def start(self) -> None:
        """Start the renewal thread (call once, from the event loop, after :meth:`open`)."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._renew_forever, name=f"session {self.worker_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (idempotent); the thread exits after a call in flight."""
        self._stop.set()

    def give_up(self) -> None:
        """Stop renewing and treat the session as lost now (the worker is leaving because it
        reaches nothing): every stream attached to it ends without another write. The store
        still says it is live; :meth:`revoke` may still write its tombstone."""
        self.stop()
        self._lost(SessionState.REVOKED)

    async def drain(self) -> None:
        """Mark the session DRAINING. Raises :class:`StoreError` / :class:`SessionExpired`."""
        await asyncio.to_thread(self._store.mark_draining, self.worker_id)

    async def revoke(self) -> bool:
        """End the session (live, or given up): stop renewing and write the tombstone (etcd's
        revoke). True when this call wrote it. Raises :class:`StoreError`."""
        self.stop()
        expiry = await asyncio.to_thread(
            self._store.expire, self.worker_id, by=self.worker_id, seen_hb=None
        )
        self.state = SessionState.ENDED
        return expiry.won

    # --- what the loop asks ----------------------------------------------------------------

    @property
    def live(self) -> bool:
        """True until the session expired or was revoked."""
        return self.state is SessionState.LIVE

    def fenced(self, now_mono: float | None = None) -> bool:
        """True when holders must not deliver now (past the deadline, or no longer live)."""
        now = time.monotonic() if now_mono is None else now_mono
        return not self.live or not rules.is_safe_to_deliver(now, self.deadline_mono)

    def behind_seconds(self, now_mono: float | None = None) -> float:
        """How long the renewal now due has been due without succeeding (0: on time)."""
        now = time.monotonic() if now_mono is None else now_mono
        due = self.last_success_sent_mono + self.settings.heartbeat_seconds
        return max(0.0, now - due)

    def healthy(self, now_mono: float | None = None) -> bool:
        """Live, inside the deadline, renewals not a whole heartbeat behind, and not on
        probation without a renewal yet: only such a session takes streams or judges others
        dead."""
        now = time.monotonic() if now_mono is None else now_mono
        if self.probation and not self.last_renewed_mono:
            return False
        return not self.fenced(now) and self.behind_seconds(now) <= self.settings.heartbeat_seconds

    async def wait_renewed(self, timeout_seconds: float | None = None) -> None:
        """Return after the next successful renewal is published (or the timeout)."""
        renewed = self._renewed
        try:
            async with asyncio.timeout(timeout_seconds):
                await renewed.wait()
        except TimeoutError:
            return

    def note_fenced(self) -> None:
        """Log once per fencing that the deadline passed (holders pause on their own)."""
        if self._fenced_logged or not self.live:
            return
        self._fenced_logged = True
        logger.warning(
            "session fenced",
            behind_seconds=round(self.behind_seconds(), 3),
            deadline_passed_seconds=round(time.monotonic() - self.deadline_mono, 3),
        )

    def refresh_active_streams(self) -> None:
        """Copy the stream count and the capacity the worker can use for the next renewal (the
        thread reads the copies): what the slots leave, or 0 while its lease renewals go
        unanswered (it takes no streams then)."""
        self._active_copy = self._active_streams()
        if self._load_figures is not None:
            self._load_copy = self._load_figures()
        unanswered = self._leases_unanswered is not None and self._leases_unanswered()
        if unanswered != self._withholding:
            self._withholding = unanswered
            if unanswered:
                logger.warning("advertising no capacity: lease renewals unanswered")
            else:
                logger.info("advertising capacity again")
        self._capacity_copy = (
            0 if unanswered else self.slots.usable_capacity(self.settings.capacity)
        )

    def lose_slot(
        self, slot: int, stream_id: str, now_mono: float, *, write_may_land: bool
    ) -> None:
        """``stream_id``'s item may still name ``slot`` (see :mod:`worker.fencing.slots`): keep the
        slot out of use until a read settles it, no sooner than a write still on its way could land
        (``write_may_land``: an acquire's; a release's landing only frees it)."""
        settle = rules.LOST_WRITE_LANDS_LEASES * self.settings.lease_seconds
        self.slots.lose(slot, stream_id, now_mono + (settle if write_may_land else 0.0))
        if self._count is not None:
            self._count(WorkerMetric.CHECKPOINT_SLOTS_LOST)
        logger.warning(
            "checkpoint slot lost",
            stream_id=stream_id,
            slot=slot,
            lost=self.slots.lost,
            usable_capacity=self.slots.usable_capacity(self.settings.capacity),
        )

    # --- the renewal thread ------------------------------------------------------------------

    def _renew_forever(self) -> None:
        settings = self.settings
        interval = settings.heartbeat_seconds
        last_success = self.last_success_sent_mono
        next_send = last_success + interval
        next_check = 0.0
        while not self._stop.wait(max(0.0, next_send - time.monotonic())):
            sent = time.monotonic()
            lag_ms = max(0.0, sent - next_send) * 1000.0
            try:
                self._send_renewal()
            except SessionExpired:
                self._to_loop(self._lost, SessionState.EXPIRED)
                return
            except Exception as exc:  # StoreError, or a bug in a dependency: retry soon
                logger.debug("session renewal unanswered", error=describe(exc))
                now_mono = time.monotonic()
                self._to_loop(self._measured, lag_ms, (now_mono - sent) * 1000.0)
                deadline = rules.fence_deadline_mono(
                    last_success, settings.lease_seconds, settings.fence_margin_seconds
                )
                if now_mono >= next_check and not rules.is_safe_to_deliver(now_mono, deadline):
                    next_check = now_mono + interval  # one read per heartbeat while out of reach
                    confirmed = self._judge_unanswered(deadline + settings.fence_margin_seconds)
                    if confirmed is None:
                        return  # the session is over
                    if confirmed:
                        last_success = confirmed
                        self._to_loop(self._renewed_at, confirmed)
                        next_send = confirmed + interval
                        continue
                next_send = time.monotonic() + rules.retry_delay_seconds(interval, random.random())
                continue
            last_success = sent
            self._to_loop(self._measured, lag_ms, (time.monotonic() - sent) * 1000.0)
            self._to_loop(self._renewed_at, sent)
            next_send = sent + interval

    def _send_renewal(self) -> None:
        """One renewal of the session, with what the loop last copied for it. Raises
        :class:`SessionExpired`, or :class:`StoreError` when unanswered."""
        now = wall_ms()
        expires = rules.next_session_expiry_ms(
            now, self.settings.lease_ms, self._last_sent_expiry_ms
        )
        self._last_sent_expiry_ms = expires
        self._renewal_store.renew(
            self.worker_id,
            expires_at_ms=expires,
            now_ms=now,
            active_streams=self._active_copy,
            capacity=self._capacity_copy,
            checkpoints=self.slots.vector() if self.carries_checkpoints else None,
            load_milli=self._load_copy[0],
            cpu_permille=self._load_copy[1],
        )

    def _judge_unanswered(self, revoke_from_mono: float) -> float | None:
        """Past the deadline with no renewal answered: find out why (see the module docstring).

        Returns None when the session is over (revoked here, or expired by a peer); 0.0 to go on
        renewing (the store answers nothing: out of reach); or when a renewal sent after the
        store answered the read succeeded, the monotonic time it was sent — the renewal that
        failed was sent while the store was slow for everyone, a brownout that has just ended.
        Only a renewal that fails after the store answered a read revokes the session. The
        tombstone, which lets peers take the streams at once, is not written before
        ``revoke_from_mono`` (the deadline + the fence margin: a sink call begun before the
        deadline has ended by then)."""
        try:
            stored = self._renewal_store.read(self.worker_id)
        except Exception as exc:  # the store does not answer this worker at all
            logger.debug("session read unanswered", error=describe(exc))
            return 0.0
        if stored is None or not stored.is_live:
            self._to_loop(self._lost, SessionState.EXPIRED)
            return None
        confirm = time.monotonic()
        try:
            self._send_renewal()
        except SessionExpired:
            self._to_loop(self._lost, SessionState.EXPIRED)
            return None
        except Exception as exc:
            logger.debug("session renewal unanswered after a read", error=describe(exc))
        else:
            return confirm
        # The store answers, the renewals do not get through: give the session up. Renewals
        # stop first; one still on its way lands on the tombstone and changes nothing.
        self._to_loop(self._lost, SessionState.REVOKED)
        if self._stop.wait(max(0.0, revoke_from_mono - time.monotonic())):
            return None  # the worker is leaving: its exit writes the tombstone, sink closed
        interval = self.settings.heartbeat_seconds
        give_up_at = time.monotonic() + self.settings.lease_seconds
        while True:
            try:
                expiry = self._renewal_store.expire(self.worker_id, by=self.worker_id, seen_hb=None)
            except Exception as exc:
                if time.monotonic() >= give_up_at:
                    # Its hb no longer moves: peers judge it dead within a lease anyway.
                    logger.warning("session not revoked", error=describe(exc))
                    return None
                if self._stop.wait(rules.retry_delay_seconds(interval, random.random())):
                    return None
                continue
            logger.warning(
                "session revoked: renewals unanswered",
                stored_hb=stored.hb,
                revoked=expiry.won,
            )
            return None

    def _to_loop(self, callback: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed meanwhile
            return

    # --- in the loop -------------------------------------------------------------------------

    def _measured(self, lag_ms: float, call_ms: float) -> None:
        if self._observe is not None:
            self._observe(WorkerMetric.RENEWAL_LAG_MS, lag_ms)
            self._observe(RENEWAL_CALL_MS, call_ms)

    def _renewed_at(self, sent_mono: float) -> None:
        """A renewal sent at ``sent_mono`` succeeded."""
        if self.live:
            self.last_renewed_mono = max(self.last_renewed_mono, sent_mono)
        self._publish(sent_mono)

    def _publish(self, sent_mono: float) -> None:
        """A renewal (or the create) sent at ``sent_mono`` succeeded: move the deadline."""
        if not self.live or sent_mono <= self.last_success_sent_mono:
            return
        settings = self.settings
        self.last_success_sent_mono = sent_mono
        deadline = rules.fence_deadline_mono(
            sent_mono, settings.lease_seconds, settings.fence_margin_seconds
        )
        if deadline <= self.deadline_mono:
            return
        was_fenced = self.fenced()
        self.deadline_mono = deadline
        if self.carries_checkpoints:
            self._events.record(
                LeaseEventKind.SESSION_RENEWED,
                "",
                0,
                deadline_mono=deadline,
                worker_id=self.worker_id,
            )
        if was_fenced and self._fenced_logged and not self.fenced():
            logger.info("session renewed after fencing: resuming")
        self._fenced_logged = self.fenced()
        self.refresh_active_streams()
        renewed, self._renewed = self._renewed, asyncio.Event()
        renewed.set()

    def _lost(self, state: SessionState) -> None:
        """The session is over (``state``: EXPIRED by the store, or REVOKED here)."""
        if not self.live:
            return
        self.state = state
        logger.error("session lost", worker_id=self.worker_id, state=state.value)
        renewed, self._renewed = self._renewed, asyncio.Event()
        renewed.set()
        self._on_expired(self)
