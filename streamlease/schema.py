"""The one definition of the table layout, states and command format.

Every other part (Lambdas, worker, CDK app, local stack) imports its names from here; no attribute
name, key prefix or index name is spelled anywhere else.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import (
        CreateTableInputTypeDef,
    )

# --- ids ---------------------------------------------------------------------------------------

STREAM_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
"""Stream ids, as the schemas check them; :data:`STREAM_ID_RULE` says it in words."""

STREAM_ID_RULE: Final = (
    "1 to 128 characters: ASCII letters, digits, '.', '_', ':' and '-', "
    "starting with a letter or a digit"
)
""":data:`STREAM_ID_PATTERN` in words, for error messages and documentation."""


def is_stream_id(text: str) -> bool:
    """Whether ``text`` is a valid stream id (:data:`STREAM_ID_RULE`)."""
    return re.fullmatch(STREAM_ID_PATTERN, text) is not None


# --- keys ------------------------------------------------------------------------------------

PK: Final = "Pk"
STREAM_PREFIX: Final = "CONN#"
WORKER_PREFIX: Final = "WORKER#"
FLEET_DIGEST_KEY: Final = "FLEET#digest"
"""Partition key of the fleet digest item (:class:`DigestAttr`)."""


def stream_key(stream_id: str) -> str:
    """Partition key value of a stream item."""
    return f"{STREAM_PREFIX}{stream_id}"


def worker_key(worker_id: str) -> str:
    """Partition key value of a worker item."""
    return f"{WORKER_PREFIX}{worker_id}"


def stream_id_of(pk: str) -> str:
    """Inverse of :func:`stream_key`. Raises ``ValueError`` for a key that is not a stream's."""
    if not pk.startswith(STREAM_PREFIX):
        raise ValueError(f"not a stream key: {pk!r}")
    return pk[len(STREAM_PREFIX) :]


def worker_id_of(pk: str) -> str:
    """Inverse of :func:`worker_key`. Raises ``ValueError`` for a key that is not a worker's."""
    if not pk.startswith(WORKER_PREFIX):
        raise ValueError(f"not a worker key: {pk!r}")
    return pk[len(WORKER_PREFIX) :]


# --- worker ids ------------------------------------------------------------------------------
# A worker id is unique per session (one or more per process incarnation): ``<task id>/<pid>-<4
# hex>`` on ECS (the task id is the last segment of the task ARN), ``<host>/<pid>-<4 hex>``
# elsewhere, or a configured id (``<id>``, then ``<id>.2``, ``<id>.3`` for later sessions). The
# reaper finds a stopped task's sessions by "the id is the task id, or continues it after a
# separator".


def task_id_of(task_arn: str) -> str:
    """The task id: the last ``/`` segment of an ECS task ARN (``""`` for an empty ARN)."""
    text = task_arn.strip().rstrip("/")
    return text.rsplit("/", 1)[-1] if text else ""


def worker_id_for(base: str, pid: int, suffix: str) -> str:
    """``<base>/<pid>-<suffix>``; ``base`` is the task id or the host name."""
    return f"{base}/{pid}-{suffix}"


def belongs_to_task(worker_id: str, task_id: str) -> bool:
    """True when ``worker_id`` names a worker of task ``task_id`` by the id prefix rule.

    The id equals the task id or continues it after a non-alphanumeric separator, so task
    ``abc`` never claims worker ``abcd/1-ff``. An empty task id claims nothing.
    """
    if not task_id or not worker_id.startswith(task_id):
        return False
    rest = worker_id[len(task_id) :]
    return rest == "" or not rest[0].isalnum()


class StopCode(StrEnum):
    """ECS's ``stopCode`` of a "task stopped" event: the ones the reaper tells apart (the
    reaper's :func:`~lambdas.reaper.is_planned_stop`), and what the local supervisor reports."""

    CONTAINER_EXITED = "EssentialContainerExited"
    """The worker exited by itself: a crash (ECS gives no other code for it)."""
    USER_INITIATED = "UserInitiated"
    """Someone stopped the task (``ecs stop-task``; locally, a SIGTERM the worker drained on)."""
    SPOT_INTERRUPTION = "SpotInterruption"
    TERMINATION_NOTICE = "TerminationNotice"
    """Fargate maintenance retiring the task, with notice."""
    SERVICE_SCHEDULER = "ServiceSchedulerInitiated"
    """The service stopped it: a deployment or scale-in, or a failed health check."""


# --- states ----------------------------------------------------------------------------------


class DesiredState(StrEnum):
    """What the control plane wants for a stream."""

    STARTED = "STARTED"
    STOPPED = "STOPPED"


class ConnectionState(StrEnum):
    """How a held stream's upstream connection is doing, as its holder last wrote it (only on a
    change, never per message or heartbeat)."""

    CONNECTING = "connecting"
    """Acquired; the first connection is being opened."""
    CONNECTED = "connected"
    RETRYING = "retrying"
    """The connection failed or dropped; reconnecting with backoff (``last_error`` says why)."""
    REJECTED = "rejected"
    """The upstream refused the stream (a 4xx at the handshake, a forbidden address): the holder
    keeps the lease and tries again every ``backoff_max_seconds``; nothing flows meanwhile."""
    ENDED = "ended"
    """The upstream finished the stream (close 1000): released and set STOPPED."""
    STALLED = "stalled"
    """Connected, but no frame arrived for the stream's idle threshold: the feed went quiet."""
    MALFORMED = "malformed"
    """Frames arrive but none can be delivered (``last_error`` names the cause, e.g. no seq
    where the profile says)."""
    SINK_FAILING = "sink_failing"
    """Frames arrive but the sink keeps refusing them: nothing is delivered."""


TROUBLE_STATES: Final = frozenset(
    {
        ConnectionState.RETRYING,
        ConnectionState.REJECTED,
        ConnectionState.STALLED,
        ConnectionState.MALFORMED,
        ConnectionState.SINK_FAILING,
    }
)
"""Connection states of a held stream that delivers nothing: shown first, counted, alarmed."""


class WorkerState(StrEnum):
    """Lifecycle of a worker's session as published in its worker item.

    RUNNING and DRAINING are *live*: renewals succeed only in these states. EXPIRED is a
    tombstone: written once, by a peer that proved the session dead, by the reaper, or by the
    worker itself at the end of a drain; a session never comes back from it.
    """

    RUNNING = "RUNNING"
    DRAINING = "DRAINING"
    EXPIRED = "EXPIRED"


LIVE_WORKER_STATES: Final = (WorkerState.RUNNING, WorkerState.DRAINING)


class Liveness(StrEnum):
    """How a fleet proves its holders alive (architecture §4). A fleet runs one mode."""

    SESSION = "session"
    """One renewal per worker (its session); streams are attached to it. The default."""
    STREAM = "stream"
    """One renewal per held stream (the seed's protocol): blast radius of one stream."""


# --- stream item attributes ------------------------------------------------------------------


class StreamAttr:
    """Attribute names of a stream item (``CONN#<id>``)."""

    DESIRED_STATE: Final = "desired_state"
    WS_URL: Final = "ws_url"
    LEASE_OWNER: Final = "lease_owner"
    LEASE_EXPIRES_AT_MS: Final = "lease_expires_at_ms"
    LAST_SEQ: Final = "last_seq"
    LEASE_EPOCH: Final = "lease_epoch"
    GENERATION: Final = "generation"
    CREATED_AT: Final = "created_at"
    UPDATED_AT: Final = "updated_at"
    CREATED_BY: Final = "created_by"
    UPDATED_BY: Final = "updated_by"
    LAST_ERROR: Final = "last_error"
    LAST_ERROR_AT: Final = "last_error_at"
    TAKEOVERS: Final = "takeovers"
    LEASE_ACQUIRED_AT_MS: Final = "lease_acquired_at_ms"
    LEASE_RELEASED_EPOCH: Final = "lease_released_epoch"
    """The epoch whose holder last released the stream itself (absent: never). Only that
    holding's own release writes it, so a retried release whose answer was lost can tell that
    its first attempt landed even after another worker has acquired the stream since."""
    LEASE_SLOT: Final = "lease_slot"
    """Sessions: the holder's checkpoint-vector slot of this stream (absent when free)."""
    PROFILE: Final = "profile"
    """The connection profile (a map, :mod:`streamlease.profile`); absent: the default."""
    CONNECTION_STATE: Final = "connection_state"
    """A :class:`ConnectionState` (absent while nobody holds the stream)."""
    CONNECTION_SINCE: Final = "connection_since"
    """When the connection state last changed (ISO-8601 UTC)."""
    FRAMES_RECEIVED: Final = "frames_received"
    """Progress of the current holding (since ``lease_acquired_at_ms``), written by the holder
    with its connection state and at most every few minutes besides: frames received ..."""
    FRAMES_DELIVERED: Final = "frames_delivered"
    """... messages the sink acknowledged ..."""
    FRAMES_MALFORMED: Final = "frames_malformed"
    """... frames that could not be delivered (no seq where the profile says, out of bounds) ..."""
    FRAMES_CONTROL: Final = "frames_control"
    """... control frames skipped (the profile's ``control`` conditions: pongs, heartbeats) ..."""
    SEQ_GAPS: Final = "seq_gaps"
    """... sequence gaps seen ..."""
    LAST_MESSAGE_AT_MS: Final = "last_message_at_ms"
    """... and when the last delivered message was received (epoch ms; absent: none yet)."""
    PROGRESS_AT_MS: Final = "progress_at_ms"
    """When the progress counters above were written (epoch ms)."""
    PROGRESS_SEQ: Final = "progress_seq"
    """The last seq the sink had acknowledged when the counters were written (absent: none in
    this holding yet): with a renewal's checkpoint, the two readings a delivery rate needs."""
    STREAM_ID: Final = "stream_id"
    DELETED_AT: Final = "deleted_at"
    """Set only on a tombstone: when the stream was deleted (ISO-8601 UTC)."""
    EXPIRY_SHARD: Final = "expiry_shard"
    """Present exactly while the stream is STARTED and not attached to a session (free, or
    held by a per-stream lease): :func:`~streamlease.indexes.expiry_shard`, the partition key
    of :data:`~streamlease.indexes.BY_SHARD_EXPIRY`. Only an index key, never a condition of the
    lease protocol."""


def stream_attributes() -> tuple[str, ...]:
    """Every attribute name of :class:`StreamAttr` (the key ``Pk`` excepted)."""
    return tuple(
        value
        for name, value in vars(StreamAttr).items()
        if name.isupper() and isinstance(value, str)
    )


TOMBSTONE_KEEPS: Final = (StreamAttr.LEASE_EPOCH, StreamAttr.GENERATION, StreamAttr.DELETED_AT)
"""What a deleted stream's item keeps (a *tombstone*): the counters a re-created stream of the
same id continues above, and when it was deleted. Everything else is removed, ``desired_state``
and ``lease_owner`` with it, so a tombstone is in no stream index."""


class WorkerAttr:
    """Attribute names of a worker item (``WORKER#<id>``)."""

    WORKER_ID: Final = "worker_id"
    HEARTBEAT_AT_MS: Final = "heartbeat_at_ms"
    EXPIRES_AT_MS: Final = "expires_at_ms"
    STATE: Final = "state"
    ACTIVE_STREAMS: Final = "active_streams"
    CAPACITY: Final = "capacity"
    LOAD_MILLI: Final = "load_milli"
    """What the worker's streams cost it, in thousandths of a load unit per second
    (:mod:`streamlease.placement`); absent until its first renewal that measured it. Not in the
    ``fleet`` index: read from the item (``SessionStore.read_loads``)."""
    CPU_PERMILLE: Final = "cpu_permille"
    """The worker process's CPU use over the last heartbeat, in thousandths of one core."""
    HOST: Final = "host"
    PID: Final = "pid"
    TASK_ARN: Final = "task_arn"
    VERSION: Final = "version"
    STARTED_AT_MS: Final = "started_at_ms"
    KIND: Final = "kind"
    HB: Final = "hb"
    """Renewal counter: +1 on every successful session renewal. Peers that see it unchanged for
    a whole lease on their own monotonic clock know the session has fenced itself."""
    LIVENESS: Final = "liveness"
    """The :class:`Liveness` mode this worker runs (a fleet never mixes them)."""
    CHECKPOINTS: Final = "checkpoints"
    """Sessions: the checkpoint vector (binary, :mod:`streamlease.checkpoints`)."""
    EXPIRED_AT_MS: Final = "expired_at_ms"
    EXPIRED_BY: Final = "expired_by"


class DigestAttr:
    """Attribute names of the fleet digest item (``FLEET#digest``): the fair share as the
    fleet's elected watcher last counted it, and the lease that makes it the one writer."""

    WRITER: Final = "writer"
    """The session id of the worker that writes the digest."""
    WRITER_EXPIRES_AT_MS: Final = "writer_expires_at_ms"
    """Until when the writer's claim stands (wall ms); anyone may take the digest over after."""
    WRITTEN_AT_MS: Final = "written_at_ms"
    SESSIONS: Final = "sessions"
    """Session items in the fleet index (live ones and tombstones not yet deleted)."""
    LIVE_WORKERS: Final = "live_workers"
    TOTAL_STREAMS: Final = "total_streams"
    DEFICIT: Final = "deficit"
    SURPLUS: Final = "surplus"
    """Streams the workers above share + slack hold beyond the share."""
    FILL_WRITTEN_AT_MS: Final = "fill_written_at_ms"
    """When ``fill_to_share`` was written: a writer of an earlier version updates the item
    without it, and a reader takes it only while this is ``written_at_ms``."""
    FILL_TO_SHARE: Final = "fill_to_share"
    """True when takers fill up to the share and the deficit is counted to it (absent: to the
    share rounded down)."""
    LOAD_MEAN_MILLI: Final = "load_mean_milli"
    """The fleet's mean load per sharing worker (thousandths of a load unit per second);
    absent while some worker has published no load (counts decide)."""
    LOAD_ROOM_MILLI: Final = "load_room_milli"
    LOAD_SURPLUS_MILLI: Final = "load_surplus_milli"


# Worker items carry KIND = WORKER_KIND so the fleet can be listed through its own sparse index
# instead of a table scan. Stream items never carry it.
WORKER_KIND: Final = "WORKER"

SESSION_HELD_MS: Final = 2**53 - 1
"""``lease_expires_at_ms`` of a stream held through a session: fixed at acquire, never renewed.

Far beyond any wall clock, so every "expired before ``t``" query of the orphan index (orphans;
the per-stream mode's suspects) skips it, and it moves the index key only when ownership
changes. Whether such a lease is still good is its session's business (``WORKER#<owner>``).
"""


# --- the consumer's watermark table ----------------------------------------------------------
# A table of its own (not the lease table): one item per (consumer, Kinesis shard) holding the
# watermarks of every stream seen in that shard (streamlease.consumer, architecture §3 "Sink
# records"). The CDK construct builds it from WATERMARK_PK and WATERMARK_KEY_TYPE alone.

WATERMARK_PK: Final = "Pk"
"""Partition key of the watermark table (its only key)."""
WATERMARK_KEY_TYPE: Final[Literal["S"]] = "S"
WATERMARK_PREFIX: Final = "SHARD#"


class WatermarkAttr:
    """Attribute names of a watermark item. Short: every byte of an item is billed on each
    write (1 write unit per started KB)."""

    VERSION: Final = "v"
    """+1 on every write; each write is conditional on the version it read (a racing or stale
    consumer cannot move watermarks back)."""
    MARKS: Final = "wm"
    """The watermarks, binary (``streamlease.consumer.codec``)."""
    SEQUENCE_NUMBER: Final = "sn"
    """The Kinesis sequence number of the last record of the last batch written."""


def watermark_key(namespace: str, shard_id: str) -> str:
    """Partition key value of one shard's watermark item: ``SHARD#<namespace>/<shard id>``.
    ``namespace`` names the consuming application and the stream it reads (two applications
    reading one stream keep separate watermarks, as KCL applications keep separate lease
    tables)."""
    return f"{WATERMARK_PREFIX}{namespace}/{shard_id}"


def watermark_table_kwargs(table_name: str) -> CreateTableInputTypeDef:
    """``CreateTable`` parameters of the watermark table for the local stack and tests
    (on-demand billing, the key schema the CDK construct uses)."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": WATERMARK_PK, "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": WATERMARK_PK, "AttributeType": WATERMARK_KEY_TYPE}
        ],
    }
