"""Typed views of table items, built from plain Python values (boto3-deserialized items)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from streamlease.schema import (
    LIVE_WORKER_STATES,
    PK,
    SESSION_HELD_MS,
    WORKER_KIND,
    ConnectionState,
    DesiredState,
    Liveness,
    StreamAttr,
    WorkerAttr,
    WorkerState,
    stream_id_of,
    worker_key,
)
from streamlease.seqs import NOTHING_DELIVERED


def iso_ms(epoch_ms: int) -> str:
    """``epoch_ms`` as ISO-8601 UTC with milliseconds, e.g. ``2026-11-29T08:41:20.123Z``."""
    moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def _maybe_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _int(value: Any, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, Decimal | int | float):
        return int(value)
    return int(str(value))


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _plain_map(value: Any) -> dict[str, Any] | None:
    """A stored map with DynamoDB's Decimals made ints again (profiles hold no fractions)."""
    if not isinstance(value, Mapping):
        return None

    def plain(v: Any) -> Any:
        if isinstance(v, Decimal):
            return int(v)
        if isinstance(v, Mapping):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    result: dict[str, Any] = plain(value)
    return result


def _connection(value: Any) -> ConnectionState | None:
    try:
        return None if value is None else ConnectionState(str(value))
    except ValueError:
        return None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def is_tombstone(item: Mapping[str, Any]) -> bool:
    """True when ``item`` is what a deleted stream leaves behind (see ``TOMBSTONE_KEEPS``).

    A tombstone is not a stream: it only carries the epoch and generation a re-created stream
    of the same id continues above.
    """
    return StreamAttr.DELETED_AT in item


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """What a holder reported about its holding of a stream: frames received, delivered (the
    sink acknowledged them), malformed (undeliverable), control (skipped as the profile says) and
    sequence gaps since it acquired the
    stream, when the last delivered message was received and when this was written (epoch ms).

    Written with each connection-state change and at most every few minutes besides, so the
    counts may trail the holder's own by that much."""

    received: int
    delivered: int
    malformed: int
    gaps: int
    last_message_at_ms: int | None
    """None: no message delivered yet."""
    at_ms: int
    control: int = 0
    """Control frames skipped (not data, not malformed)."""
    seq: int | None = None
    """The last seq the sink had acknowledged at ``at_ms``; None: nothing in this holding yet."""

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> StreamProgress | None:
        """The progress in a stream item; None when no holder has written any."""
        at = item.get(StreamAttr.PROGRESS_AT_MS)
        if at is None:
            return None
        return cls(
            received=_int(item.get(StreamAttr.FRAMES_RECEIVED)),
            delivered=_int(item.get(StreamAttr.FRAMES_DELIVERED)),
            malformed=_int(item.get(StreamAttr.FRAMES_MALFORMED)),
            gaps=_int(item.get(StreamAttr.SEQ_GAPS)),
            control=_int(item.get(StreamAttr.FRAMES_CONTROL)),
            last_message_at_ms=_opt_int(item.get(StreamAttr.LAST_MESSAGE_AT_MS)),
            at_ms=_int(at),
            seq=_opt_int(item.get(StreamAttr.PROGRESS_SEQ)),
        )


@dataclass(frozen=True)
class Stream:
    """A stream item: what should run, who owns it and how far it got."""

    stream_id: str
    desired_state: DesiredState
    ws_url: str
    owner: str | None
    expires_at_ms: int
    last_seq: int
    """The last seq its sink acknowledged, or :data:`~streamlease.seqs.NOTHING_DELIVERED` (also
    for an item without one)."""
    epoch: int
    generation: int
    takeovers: int = 0
    acquired_at_ms: int = 0
    created_at: str | None = None
    updated_at: str | None = None
    created_by: str | None = None
    updated_by: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    slot: int | None = None
    connection_state: ConnectionState | None = None
    connection_since: str | None = None
    profile: Mapping[str, Any] | None = None
    """The connection profile as stored (:mod:`streamlease.profile`); None: the default."""
    progress: StreamProgress | None = None
    """The last progress a holder wrote (of this holding or an earlier one: see
    :attr:`current_progress`)."""

    @property
    def current_progress(self) -> StreamProgress | None:
        """:attr:`progress` when it describes the current holding: the stream is held and the
        holder wrote it after acquiring (its counters start at the acquisition); else None."""
        progress = self.progress
        if self.owner is None or progress is None or progress.at_ms < self.acquired_at_ms:
            return None
        return progress

    @property
    def awaits_a_holder(self) -> bool:
        """Wanted and held by nobody: what a release's handoff command is for (a stream
        acquired since, after a retried release that had landed, needs none)."""
        return self.desired_state is DesiredState.STARTED and self.owner is None

    @property
    def last_error_active(self) -> bool:
        """False when ``last_error`` is from the past: the stream has been connected since."""
        if self.last_error is None:
            return False
        if self.connection_state is not ConnectionState.CONNECTED or not self.connection_since:
            return True
        return (self.last_error_at or "") >= self.connection_since

    @property
    def held_by_session(self) -> bool:
        """True when the lease is attached to its owner's session (no expiry of its own)."""
        return self.owner is not None and self.expires_at_ms == SESSION_HELD_MS

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Stream:
        """Build from a deserialized item. Raises ``ValueError``/``KeyError`` for a non-stream,
        a tombstone included (check :func:`is_tombstone` first where one may be met)."""
        if is_tombstone(item):
            raise ValueError(f"a deleted stream's tombstone, not a stream: {item.get(PK)!r}")
        return cls(
            stream_id=stream_id_of(str(item[PK])),
            desired_state=DesiredState(item.get(StreamAttr.DESIRED_STATE, DesiredState.STOPPED)),
            ws_url=str(item.get(StreamAttr.WS_URL, "")),
            owner=_str(item.get(StreamAttr.LEASE_OWNER)),
            expires_at_ms=_int(item.get(StreamAttr.LEASE_EXPIRES_AT_MS)),
            last_seq=_int(item.get(StreamAttr.LAST_SEQ), NOTHING_DELIVERED),
            epoch=_int(item.get(StreamAttr.LEASE_EPOCH)),
            generation=_int(item.get(StreamAttr.GENERATION)),
            takeovers=_int(item.get(StreamAttr.TAKEOVERS)),
            acquired_at_ms=_int(item.get(StreamAttr.LEASE_ACQUIRED_AT_MS)),
            created_at=_str(item.get(StreamAttr.CREATED_AT)),
            updated_at=_str(item.get(StreamAttr.UPDATED_AT)),
            created_by=_str(item.get(StreamAttr.CREATED_BY)),
            updated_by=_str(item.get(StreamAttr.UPDATED_BY)),
            last_error=_str(item.get(StreamAttr.LAST_ERROR)),
            last_error_at=_str(item.get(StreamAttr.LAST_ERROR_AT)),
            slot=_opt_int(item.get(StreamAttr.LEASE_SLOT)),
            connection_state=_connection(item.get(StreamAttr.CONNECTION_STATE)),
            connection_since=_str(item.get(StreamAttr.CONNECTION_SINCE)),
            profile=_plain_map(item.get(StreamAttr.PROFILE)),
            progress=StreamProgress.from_item(item),
        )


# Slots: a worker keeps a Lease and a StreamProgress per held stream, and parses LeaseViews by
# the thousand from its index reads.
@dataclass(frozen=True, slots=True)
class Lease:
    """What an acquirer holds: the fencing epoch and where to resume.

    ``previous_owner`` is set when the acquire was a takeover of an expired (not released) lease;
    ``slot`` when the lease is attached to a session (its checkpoint-vector slot).
    """

    stream_id: str
    owner: str
    epoch: int
    expires_at_ms: int
    last_seq: int
    """The checkpoint to resume after (:data:`~streamlease.seqs.NOTHING_DELIVERED`: from the
    feed's beginning)."""
    ws_url: str
    generation: int
    previous_owner: str | None = None
    slot: int | None = None
    profile: Mapping[str, Any] | None = None

    @property
    def is_takeover(self) -> bool:
        """True when the lease was taken from a holder that did not release it."""
        return self.previous_owner is not None


@dataclass(frozen=True, slots=True)
class LeaseView:
    """A stream's lease as an index returns it (no payload attributes; what an index does not
    project is left at its default)."""

    stream_id: str
    owner: str | None
    epoch: int
    expires_at_ms: int
    slot: int | None = None
    desired_state: DesiredState | None = None
    generation: int = 0

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> LeaseView:
        """Build from a deserialized index item."""
        state = item.get(StreamAttr.DESIRED_STATE)
        return cls(
            stream_id=stream_id_of(str(item[PK])),
            owner=_str(item.get(StreamAttr.LEASE_OWNER)),
            epoch=_int(item.get(StreamAttr.LEASE_EPOCH)),
            expires_at_ms=_int(item.get(StreamAttr.LEASE_EXPIRES_AT_MS)),
            slot=_opt_int(item.get(StreamAttr.LEASE_SLOT)),
            desired_state=None if state is None else DesiredState(state),
            generation=_int(item.get(StreamAttr.GENERATION)),
        )


@dataclass(frozen=True)
class WorkerInfo:
    """A worker item: one worker process's session (live, draining, or a tombstone)."""

    worker_id: str
    state: WorkerState
    heartbeat_at_ms: int
    expires_at_ms: int
    active_streams: int
    capacity: int
    host: str
    pid: int
    task_arn: str = ""
    version: str = ""
    started_at_ms: int = 0
    hb: int = 0
    liveness: Liveness = Liveness.SESSION
    checkpoints: bytes | None = None
    """The checkpoint vector (only in a consistent read of the item: the fleet index does not
    project it)."""
    expired_at_ms: int = 0
    """When the tombstone was written (0 while live)."""
    load_milli: int | None = None
    """What its streams cost it (thousandths of a load unit per second,
    :mod:`streamlease.placement`); None until a renewal published it."""
    cpu_permille: int | None = None
    """Its process's CPU use over its last heartbeat (thousandths of one core); None: unknown."""

    @property
    def load(self) -> float | None:
        """Its published load in load units per second, or None."""
        return None if self.load_milli is None else self.load_milli / 1000

    @property
    def is_live(self) -> bool:
        """True for RUNNING and DRAINING sessions (renewals can still succeed)."""
        return self.state in LIVE_WORKER_STATES

    def to_item(self) -> dict[str, Any]:
        """The item as plain Python values (for boto3's serializer)."""
        item: dict[str, Any] = {
            PK: worker_key(self.worker_id),
            WorkerAttr.KIND: WORKER_KIND,
            WorkerAttr.WORKER_ID: self.worker_id,
            WorkerAttr.STATE: self.state.value,
            WorkerAttr.HEARTBEAT_AT_MS: self.heartbeat_at_ms,
            WorkerAttr.EXPIRES_AT_MS: self.expires_at_ms,
            WorkerAttr.ACTIVE_STREAMS: self.active_streams,
            WorkerAttr.CAPACITY: self.capacity,
            WorkerAttr.HOST: self.host,
            WorkerAttr.PID: self.pid,
            WorkerAttr.TASK_ARN: self.task_arn,
            WorkerAttr.VERSION: self.version,
            WorkerAttr.STARTED_AT_MS: self.started_at_ms,
            WorkerAttr.HB: self.hb,
            WorkerAttr.LIVENESS: self.liveness.value,
        }
        if self.checkpoints is not None:
            item[WorkerAttr.CHECKPOINTS] = self.checkpoints
        if self.load_milli is not None:
            item[WorkerAttr.LOAD_MILLI] = self.load_milli
        if self.cpu_permille is not None:
            item[WorkerAttr.CPU_PERMILLE] = self.cpu_permille
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> WorkerInfo:
        """Build from a deserialized worker item (or its fleet-index projection)."""
        checkpoints = item.get(WorkerAttr.CHECKPOINTS)
        return cls(
            worker_id=str(item[WorkerAttr.WORKER_ID]),
            state=WorkerState(item.get(WorkerAttr.STATE, WorkerState.RUNNING)),
            heartbeat_at_ms=_int(item.get(WorkerAttr.HEARTBEAT_AT_MS)),
            expires_at_ms=_int(item.get(WorkerAttr.EXPIRES_AT_MS)),
            active_streams=_int(item.get(WorkerAttr.ACTIVE_STREAMS)),
            capacity=_int(item.get(WorkerAttr.CAPACITY)),
            host=str(item.get(WorkerAttr.HOST, "")),
            pid=_int(item.get(WorkerAttr.PID)),
            task_arn=str(item.get(WorkerAttr.TASK_ARN, "")),
            version=str(item.get(WorkerAttr.VERSION, "")),
            started_at_ms=_int(item.get(WorkerAttr.STARTED_AT_MS)),
            hb=_int(item.get(WorkerAttr.HB)),
            liveness=Liveness(item.get(WorkerAttr.LIVENESS, Liveness.SESSION)),
            checkpoints=None if checkpoints is None else bytes(checkpoints),
            expired_at_ms=_int(item.get(WorkerAttr.EXPIRED_AT_MS)),
            load_milli=_maybe_int(item.get(WorkerAttr.LOAD_MILLI)),
            cpu_permille=_maybe_int(item.get(WorkerAttr.CPU_PERMILLE)),
        )
