"""The one definition of the table layout, states and command format.

Every other part (Lambdas, worker, CDK app, local stack) imports its names from here; no attribute
name, key prefix or index name is spelled anywhere else.
"""

from __future__ import annotations

import json
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

# --- keys ------------------------------------------------------------------------------------

PK: Final = "Pk"
STREAM_PREFIX: Final = "CONN#"
WORKER_PREFIX: Final = "WORKER#"


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
    """How a fleet proves its holders alive (DESIGN §4). A fleet runs one mode."""

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
    STREAM_ID: Final = "stream_id"
    DELETED_AT: Final = "deleted_at"
    """Set only on a tombstone: when the stream was deleted (ISO-8601 UTC)."""


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


# Worker items carry KIND = WORKER_KIND so the fleet can be listed through its own sparse index
# instead of a table scan. Stream items never carry it.
WORKER_KIND: Final = "WORKER"

SESSION_HELD_MS: Final = 2**53 - 1
"""``lease_expires_at_ms`` of a stream held through a session: fixed at acquire, never renewed.

Far beyond any wall clock, so every "expired before ``t``" query of ``by-state-expiry`` (orphans;
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


BY_STATE_EXPIRY: Final = IndexSpec(
    name="by-state-expiry",
    partition_key=StreamAttr.DESIRED_STATE,
    sort_key=StreamAttr.LEASE_EXPIRES_AT_MS,
    projected=(StreamAttr.LEASE_OWNER, StreamAttr.LEASE_EPOCH, StreamAttr.CONNECTION_STATE),
)
"""Orphans and suspects: ``desired_state = STARTED AND lease_expires_at_ms < :t``; the auditor
reads the owners and connection states of the STARTED streams here (a connection state changes
rarely, so projecting it costs little)."""

BY_OWNER: Final = IndexSpec(
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
"""What does worker X hold; sparse (absent when free). Changes only when ownership or the
desired state changes: a session's holder reads its own streams here every heartbeat to learn
of stops, and a takeover lists a dead session's streams with their epochs and slots."""

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
the fleet every second and need only the small fields."""

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

INDEXES: Final = (BY_STATE_EXPIRY, BY_OWNER, FLEET, BY_STATE)

KEY_ATTRIBUTE_TYPES: Final[dict[str, Literal["S", "N"]]] = {
    PK: "S",
    StreamAttr.DESIRED_STATE: "S",
    StreamAttr.LEASE_EXPIRES_AT_MS: "N",
    StreamAttr.STREAM_ID: "S",
    StreamAttr.LEASE_OWNER: "S",
    WorkerAttr.KIND: "S",
    WorkerAttr.STARTED_AT_MS: "N",
}
"""DynamoDB types of every attribute used as a table or index key."""


def create_table_kwargs(table_name: str) -> CreateTableInputTypeDef:
    """``CreateTable`` parameters for the local stack and tests (on-demand billing).

    The CDK app builds the same table from :data:`PK`, :data:`INDEXES` and
    :data:`KEY_ATTRIBUTE_TYPES`.
    """
    gsis: list[GlobalSecondaryIndexTypeDef] = []
    for index in INDEXES:
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
        ],
        "GlobalSecondaryIndexes": gsis,
    }


# --- commands (SQS message bodies) -----------------------------------------------------------


class CommandType(StrEnum):
    """Why a command was sent. Every command is a hint: the worker re-reads the item."""

    START = "START"
    HANDOFF = "HANDOFF"


COMMAND_VERSION: Final = 1

COMMAND_MAX_RECEIVES: Final = 5
"""Deliveries of one command before it moves to the dead-letter queue (poison messages)."""


@dataclass(frozen=True)
class Command:
    """An SQS command: "look at this stream, it may need an owner".

    ``generation`` is the stream's generation when the command was sent; a worker ignores a
    command whose generation is older than the item's (it is stale). ``rebalance``: a handoff
    from a worker above its fair share, meant for a worker below it (one at its share passes it
    on): a move that does not reduce the imbalance is a wasted handover.
    """

    type: CommandType
    stream_id: str
    generation: int
    rebalance: bool = False

    def to_json(self) -> str:
        """The message body."""
        body: dict[str, object] = {
            "v": COMMAND_VERSION,
            "type": self.type.value,
            "stream_id": self.stream_id,
            "generation": self.generation,
        }
        if self.rebalance:
            body["rebalance"] = True
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> Command:
        """Parse a message body. Raises ``ValueError`` for anything malformed (a poison message)."""
        try:
            data = json.loads(body)
        except (TypeError, ValueError) as exc:
            raise ValueError("command is not JSON") from exc
        if not isinstance(data, dict):
            raise ValueError("command is not a JSON object")
        version = data.get("v")
        if type(version) is not int or version != COMMAND_VERSION:
            raise ValueError("unsupported command version")
        stream_id = data.get("stream_id")
        generation = data.get("generation")
        if not isinstance(stream_id, str) or not stream_id:
            raise ValueError("command has no stream_id")
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            raise ValueError("command has no valid generation")
        try:
            kind = CommandType(str(data.get("type")))
        except ValueError as exc:
            raise ValueError("unknown command type") from exc
        rebalance = data.get("rebalance", False)
        if not isinstance(rebalance, bool):
            raise ValueError("command rebalance is not a boolean")
        return cls(type=kind, stream_id=stream_id, generation=generation, rebalance=rebalance)


# --- sink records ----------------------------------------------------------------------------


class SinkField:
    """Field names of every record a sink writes."""

    STREAM_ID: Final = "stream_id"
    EPOCH: Final = "epoch"
    SEQ: Final = "seq"
    RECEIVED_AT_MS: Final = "received_at_ms"
    PAYLOAD: Final = "payload"
    PAYLOAD_ENCODING: Final = "payload_encoding"
    """How ``payload`` holds the frame: ``json`` (the JSON document itself), ``text`` (a text
    frame as a JSON string) or ``base64`` (a binary frame)."""
    WORKER_ID: Final = "worker_id"
    WRITTEN_AT_MS: Final = "written_at_ms"
    """File sink: wall-clock epoch ms at which the record's batch was appended (taken in the
    sink's thread right after its last deadline check). Stamped by the sink, so not a field of
    the records handed to it; the invariant checker judges overlaps by it."""


SINK_STAMPED_FIELDS: Final = frozenset({SinkField.WRITTEN_AT_MS})
"""Fields a sink adds to what it was handed."""


class PayloadEncoding(StrEnum):
    """Values of :attr:`SinkField.PAYLOAD_ENCODING`."""

    JSON = "json"
    TEXT = "text"
    BASE64 = "base64"
