"""The one definition of the table layout, states and command format.

Every other part (Lambdas, worker, CDK app, local stack) imports its names from here; no attribute
name, key prefix or index name is spelled anywhere else.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import (
        CreateTableInputTypeDef,
        GlobalSecondaryIndexTypeDef,
        KeySchemaElementTypeDef,
        ProjectionTypeDef,
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
    held by a per-stream lease): :func:`expiry_shard`, the partition key of
    :data:`BY_SHARD_EXPIRY`. Only an index key, never a condition of the lease protocol."""


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


# --- indexes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index: name, key attributes and projection."""

    name: str
    partition_key: str
    sort_key: str | None
    projected: tuple[str, ...] | None
    """Non-key attributes projected (INCLUDE); ``None`` means KEYS_ONLY."""


INDEX_SHARDS: Final = 32
"""Partition key values :data:`BY_SHARD_EXPIRY` spreads a session fleet's free streams over: a
fleet can free and take about this many thousand streams per second before one of its
partitions throttles (1,000 write units per second each)."""


def expiry_shards(liveness: Liveness) -> int:
    """Shards of :data:`BY_SHARD_EXPIRY` for a fleet of ``liveness``: :data:`INDEX_SHARDS` for
    sessions (read by scanning, a few segments per fleet); 1 for per-stream leases, whose
    reconcile asks one partition for the leases expiring first. Every per-stream renewal moves
    its entry there (2 write units), so one partition's 1,000 write units a second bound a
    per-stream fleet to about 500 renewals a second: some 2,500 streams at the 5 s heartbeat.
    Sessions, the default, renew no stream and have no such bound."""
    return 1 if liveness is Liveness.STREAM else INDEX_SHARDS


def shard_key(shard: int) -> str:
    """The :attr:`StreamAttr.EXPIRY_SHARD` value of shard number ``shard``: ``STARTED#<nn>``
    (a per-stream fleet's one shard is ``shard_key(0)``)."""
    return f"{DesiredState.STARTED.value}#{shard:02d}"


def expiry_shard(stream_id: str, liveness: Liveness) -> str:
    """The :attr:`StreamAttr.EXPIRY_SHARD` of ``stream_id`` in a fleet of ``liveness``: a
    stable hash of the id (CRC-32) modulo :func:`expiry_shards`, so every writer agrees."""
    return shard_key(zlib.crc32(stream_id.encode()) % expiry_shards(liveness))


BY_SHARD_EXPIRY: Final = IndexSpec(
    name="by-shard-expiry",
    partition_key=StreamAttr.EXPIRY_SHARD,
    sort_key=StreamAttr.LEASE_EXPIRES_AT_MS,
    projected=(StreamAttr.LEASE_OWNER, StreamAttr.LEASE_EPOCH),
)
"""Orphans (and per-stream leases about to lapse): the STARTED streams no session holds, write-
sharded. A stream enters when it becomes free (created, started, released) and leaves when a
session takes it, so a takeover of a dead session's streams — owner to owner — writes nothing
here, and a renewal of a session never does. Sessions scan it in segments
(:func:`streamlease.rules.scan_segments`); per-stream leases query its one shard for
``lease_expires_at_ms < :t``."""

BY_STATE_EXPIRY: Final = IndexSpec(
    name="by-state-expiry",
    partition_key=StreamAttr.DESIRED_STATE,
    sort_key=StreamAttr.LEASE_EXPIRES_AT_MS,
    projected=(StreamAttr.LEASE_OWNER, StreamAttr.LEASE_EPOCH, StreamAttr.CONNECTION_STATE),
)
"""The index :data:`BY_SHARD_EXPIRY` replaces, kept only while a deployed table migrates
(:data:`MIGRATION_STAGES`): partitioned on ``desired_state``, every ownership change of the
fleet wrote its one STARTED partition. Nothing reads it any more; the stores still write the
attributes it keys on, so the previous release keeps working beside this one during a deploy."""

BY_OWNER: Final = IndexSpec(
    name="by-holder",
    partition_key=StreamAttr.LEASE_OWNER,
    sort_key=None,
    projected=(
        StreamAttr.LEASE_EPOCH,
        StreamAttr.LEASE_SLOT,
        StreamAttr.DESIRED_STATE,
        StreamAttr.GENERATION,
        StreamAttr.CONNECTION_STATE,
    ),
)
"""What does worker X hold, and how is each connection doing; sparse (absent when free). Changes
when ownership, the desired state or the connection state changes (never on a renewal): a
session's holder reads its own streams here every heartbeat to learn of stops, a takeover lists
a dead session's streams with their epochs and slots, the auditor counts held streams by
connection state and a listing by connection state scans it. Its partitions are the owners,
so its writes spread over the fleet."""

LEGACY_BY_OWNER: Final = IndexSpec(
    name="by-owner",
    partition_key=StreamAttr.LEASE_OWNER,
    sort_key=None,
    projected=(
        StreamAttr.LEASE_EPOCH,
        StreamAttr.LEASE_SLOT,
        StreamAttr.DESIRED_STATE,
        StreamAttr.GENERATION,
    ),
)
"""The index :data:`BY_OWNER` replaces (the same key, without ``connection_state``: the
connection states were read from ``by-state-expiry`` then); kept only while a deployed table
migrates (:data:`MIGRATION_STAGES`)."""

FLEET: Final = IndexSpec(
    name="fleet",
    partition_key=WorkerAttr.KIND,
    sort_key=WorkerAttr.STARTED_AT_MS,
    projected=(
        WorkerAttr.WORKER_ID,
        WorkerAttr.STATE,
        WorkerAttr.HB,
        WorkerAttr.HEARTBEAT_AT_MS,
        WorkerAttr.EXPIRES_AT_MS,
        WorkerAttr.ACTIVE_STREAMS,
        WorkerAttr.CAPACITY,
        WorkerAttr.LIVENESS,
        WorkerAttr.HOST,
        WorkerAttr.PID,
        WorkerAttr.TASK_ARN,
        WorkerAttr.VERSION,
    ),
)
"""The fleet: worker items only (sparse on ``kind``), keyed by start time, which never changes,
so a session renewal moves no index key. The checkpoint vector is not projected: peers re-read
the fleet every second and need only the small fields. Nor are the load figures
(:attr:`WorkerAttr.LOAD_MILLI`, :attr:`WorkerAttr.CPU_PERMILLE`): a deployed index's projection
cannot change, so their readers get them from the items (``SessionStore.read_loads``)."""

BY_STATE: Final = IndexSpec(
    name="by-state",
    partition_key=StreamAttr.DESIRED_STATE,
    sort_key=StreamAttr.STREAM_ID,
    projected=None,
)
"""Listing: the stream ids in one desired state, in id order (``GET /streams``).

Its keys change only when ``desired_state`` does, so lease renewals never write to it. Every
writer of a stream item sets ``stream_id``; an item without it would never be listed.
"""

INDEXES: Final = (BY_SHARD_EXPIRY, BY_OWNER, FLEET, BY_STATE)
MIGRATION_STAGES: Final = (
    (BY_STATE_EXPIRY, LEGACY_BY_OWNER, BY_SHARD_EXPIRY, FLEET, BY_STATE),
    (BY_STATE_EXPIRY, LEGACY_BY_OWNER, BY_SHARD_EXPIRY, BY_OWNER, FLEET, BY_STATE),
    (LEGACY_BY_OWNER, BY_SHARD_EXPIRY, BY_OWNER, FLEET, BY_STATE),
)
"""The indexes of a deployed table at each stage of its move from the previous release's
(:data:`BY_STATE_EXPIRY`, :data:`LEGACY_BY_OWNER`) to :data:`INDEXES`, one index created or
dropped per stage (what DynamoDB and CloudFormation allow in one update): the orphan index
added, then ``by-holder`` (this release runs from here on, the previous one beside it during
the rollout), then ``by-state-expiry`` dropped; dropping ``by-owner`` is :data:`INDEXES`."""

KEY_ATTRIBUTE_TYPES: Final[dict[str, Literal["S", "N"]]] = {
    PK: "S",
    StreamAttr.EXPIRY_SHARD: "S",
    StreamAttr.DESIRED_STATE: "S",
    StreamAttr.LEASE_EXPIRES_AT_MS: "N",
    StreamAttr.STREAM_ID: "S",
    StreamAttr.LEASE_OWNER: "S",
    WorkerAttr.KIND: "S",
    WorkerAttr.STARTED_AT_MS: "N",
}
"""DynamoDB types of every attribute used as a table or index key."""


def create_table_kwargs(
    table_name: str, indexes: tuple[IndexSpec, ...] = INDEXES
) -> CreateTableInputTypeDef:
    """``CreateTable`` parameters for the local stack and tests (on-demand billing).

    The CDK app builds the same table from :data:`PK`, :data:`INDEXES` and
    :data:`KEY_ATTRIBUTE_TYPES`. ``indexes``: another set (a table mid-migration).
    """
    gsis: list[GlobalSecondaryIndexTypeDef] = []
    used = {PK} | {k for index in indexes for k in (index.partition_key, index.sort_key) if k}
    for index in indexes:
        key_schema: list[KeySchemaElementTypeDef] = [
            {"AttributeName": index.partition_key, "KeyType": "HASH"}
        ]
        if index.sort_key:
            key_schema.append({"AttributeName": index.sort_key, "KeyType": "RANGE"})
        projection: ProjectionTypeDef = {"ProjectionType": "KEYS_ONLY"}
        if index.projected:
            projection = {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(index.projected)}
        gsis.append({"IndexName": index.name, "KeySchema": key_schema, "Projection": projection})
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": PK, "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": kind}
            for name, kind in KEY_ATTRIBUTE_TYPES.items()
            if name in used
        ],
        "GlobalSecondaryIndexes": gsis,
    }


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
