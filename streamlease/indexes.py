"""The lease table's global secondary indexes, the orphan index's shards, and the table's
``CreateTable`` parameters (the CDK app builds the same table from these names)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from streamlease.schema import (
    PK,
    DesiredState,
    Liveness,
    StreamAttr,
    WorkerAttr,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import (
        CreateTableInputTypeDef,
        GlobalSecondaryIndexTypeDef,
        KeySchemaElementTypeDef,
        ProjectionTypeDef,
    )


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index: name, key attributes and projection."""

    name: str
    partition_key: str
    sort_key: str | None
    projected: tuple[str, ...] | None
    """Non-key attributes projected (INCLUDE); ``None`` means KEYS_ONLY."""


INDEX_SHARDS: Final = 1024
"""Partition key values :data:`BY_SHARD_EXPIRY` spreads a session fleet's free streams over.
DynamoDB hashes key values onto partitions unevenly: 32 values put 9.4 % of the writes on the
busiest of 40 partitions, 1,024 put 4.3 % (2.5 % would be even), so a scale-out's handoffs are
bound by the table's partitions, not this index's. The values are data, not schema: readers
scan in segments (:func:`~streamlease.rules.scan_segments`), no condition reads the entry, and
writers with another count mix safely."""


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
