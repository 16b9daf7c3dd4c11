"""Per-request units for the model, measured: the real stores send each kind of request once to
the moto server, and :class:`bench.request_counter.RequestCounter` counts its write units
against each design's indexes (the counting ``make bench``'s write-cost section does, whose
index rules ``tests/moto/test_bench_write_units.py`` checks against moto). Read sizes are the
items read back, projected as each index projects them, by DynamoDB's size rule.

Today's design is the same requests counted against today's indexes (:data:`TODAY_INDEXES`):
the stores still write every attribute those indexes key on, so a table migrating from it keeps
both working (see the migration in docs/deploying.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from bench.fleet_model.units import Units
from bench.request_counter import RequestCounter, diff
from bench.write_units import item_size_bytes
from streamlease import aws, checkpoints, dynamo
from streamlease.fleet_digest import DigestStore
from streamlease.indexes import (
    BY_OWNER,
    BY_STATE,
    BY_STATE_EXPIRY,
    FLEET,
    INDEXES,
    LEGACY_BY_OWNER,
    IndexSpec,
    expiry_shard,
)
from streamlease.lease_store import LeaseStore
from streamlease.model import WorkerInfo
from streamlease.schema import (
    FLEET_DIGEST_KEY,
    PK,
    ConnectionState,
    DesiredState,
    Liveness,
    StreamAttr,
    WorkerState,
    stream_key,
    worker_key,
)
from streamlease.session_store import SessionStore
from streamlease.settings import Settings

TODAY_ORPHANS: Final = BY_STATE_EXPIRY
TODAY_INDEXES: Final = (BY_STATE_EXPIRY, LEGACY_BY_OWNER, FLEET, BY_STATE)
"""The indexes of today's design (``by-state-expiry`` and ``by-owner`` where
``by-shard-expiry`` and ``by-holder`` are now)."""
VECTOR_STREAMS: Final = 1000
VECTOR_SEQ: Final = 10_000_000
"""A checkpoint a stream reaches after about 12 days at 10 messages per second."""


def calibrate(settings: Settings, orphan_indexes: Mapping[str, IndexSpec]) -> dict[str, Units]:
    """Units per design key (``today`` and every other key of ``orphan_indexes``: its orphan
    index; the schema's indexes), measured once against the fresh resources of ``settings``
    (the run's moto server)."""
    client = aws.client("dynamodb", settings)
    layouts = {"today": TODAY_INDEXES, **{k: INDEXES for k in orphan_indexes if k != "today"}}
    counters = {key: RequestCounter(indexes) for key, indexes in layouts.items()}
    for counter in counters.values():
        counter.attach(client)
    table = settings.table_name
    store = LeaseStore(client, table)
    sessions = SessionStore(client, table)
    lease_ms = settings.lease_ms

    def units(action: Callable[[], object]) -> dict[str, dict[str, float]]:
        before = {k: c.snapshot() for k, c in counters.items()}
        action()
        return {
            k: {
                c: float(u)
                for c, u in diff(counters[k].snapshot(), before[k])["write_units"].items()
                if u
            }
            for k in counters
        }

    _put_streams(client, table, ["a", "b"])
    w1, w2 = _session("w1"), _session("w2")
    created = units(lambda: sessions.create(w1))
    sessions.create(w2)
    renewal = units(lambda: sessions.renew("w1", expires_at_ms=2**40, now_ms=1, active_streams=0))
    base = _item_size(client, table, worker_key("w1"))
    vector = checkpoints.encode(
        [
            checkpoints.Checkpoint(3, VECTOR_SEQ, checkpoints.stream_tag(f"s{i}"))
            for i in range(VECTOR_STREAMS)
        ]
    )
    sessions.renew("w1", expires_at_ms=2**40 + 1, now_ms=2, active_streams=0, checkpoints=vector)
    per_stream = (_item_size(client, table, worker_key("w1")) - base) / VECTOR_STREAMS
    acquire = units(lambda: store.acquire("a", "w1", lease_ms, slot=0))
    connected = units(lambda: store.record_connection("a", "w1", 1, ConnectionState.CONNECTED))
    item = _item(client, table, stream_key("a"))
    released = units(lambda: store.release("a", "w1", 1, last_seq=5))
    store.acquire("a", "w1", lease_ms, slot=0)
    store.acquire("b", "w1", lease_ms, slot=1)
    seen = sessions.read("w1")
    assert seen is not None
    tombstone = units(lambda: sessions.expire("w1", by="w2", seen_hb=seen.hb))
    taken = units(lambda: store.take_from("a", "w1", 2, 9, "w2", 0))
    freed = units(lambda: store.release_for("b", "w1", 1, 9))
    free_item = _item(client, table, stream_key("b"))
    worker_item = _item(client, table, worker_key("w2"))
    digests = DigestStore(client, table)
    digests.claim("w2", lease_ms)
    digest_write = units(
        lambda: digests.publish("w2", lease_ms, sessions=1000, live=990, total=999_000, deficit=12)
    )
    digest_bytes = _item_size(client, table, FLEET_DIGEST_KEY)
    out = {}
    for key in layouts:
        orphans = TODAY_ORPHANS if key == "today" else orphan_indexes[key]
        out[key] = Units(
            session_base_bytes=base,
            vector_bytes_per_stream=per_stream,
            renewal_index={c: u for c, u in renewal[key].items() if c != "table"},
            session_create=created[key],
            tombstone=tombstone[key],
            acquire=acquire[key],
            release=released[key],
            take_from=taken[key],
            release_for=freed[key],
            connection=connected[key],
            fleet_entry_bytes=_projected(worker_item, FLEET),
            owner_entry_bytes=_projected(item, LEGACY_BY_OWNER if key == "today" else BY_OWNER),
            orphan_entry_bytes=_projected(free_item, orphans),
            digest_bytes=digest_bytes,
            digest_write=digest_write[key],
        )
    return out


def _session(worker_id: str) -> WorkerInfo:
    return WorkerInfo(
        worker_id=worker_id,
        state=WorkerState.RUNNING,
        heartbeat_at_ms=1,
        expires_at_ms=2**40 - 1,
        active_streams=0,
        capacity=1600,
        host="ip-10-0-1-23.ec2.internal",
        pid=7,
        task_arn="arn:aws:ecs:us-east-1:123456789012:task/streamlease/0123456789abcdef0123456789abcdef",
        version="1.0.0",
        started_at_ms=1_700_000_000_000,
    )


def _put_streams(client: Any, table: str, ids: Iterable[str]) -> None:
    """Streams as the API creates them (keys, URL, a short history)."""
    for stream_id in ids:
        item = {
            PK: stream_key(stream_id),
            StreamAttr.STREAM_ID: stream_id,
            StreamAttr.DESIRED_STATE: DesiredState.STARTED.value,
            StreamAttr.WS_URL: f"wss://feed.example.com/v1/streams/{stream_id}?format=json",
            StreamAttr.LEASE_EXPIRES_AT_MS: 0,
            StreamAttr.LAST_SEQ: 0,
            StreamAttr.LEASE_EPOCH: 0,
            StreamAttr.GENERATION: 1,
            StreamAttr.CREATED_AT: "2026-11-30T12:00:00.000Z",
            StreamAttr.UPDATED_AT: "2026-11-30T12:00:00.000Z",
            StreamAttr.CREATED_BY: "arn:aws:iam::123456789012:user/ops",
            StreamAttr.UPDATED_BY: "arn:aws:iam::123456789012:user/ops",
            StreamAttr.EXPIRY_SHARD: expiry_shard(stream_id, Liveness.SESSION),
        }
        client.put_item(TableName=table, Item=dynamo.serialize(item))


def _item(client: Any, table: str, key: str) -> dict[str, Any]:
    found = client.get_item(TableName=table, Key={PK: {"S": key}}, ConsistentRead=True)
    return dict(found["Item"])


def _item_size(client: Any, table: str, key: str) -> float:
    return float(item_size_bytes(_item(client, table, key)))


def _projected(item: Mapping[str, Any], index: IndexSpec) -> float:
    """The size of ``item``'s entry in ``index``: its keys, the table key, the projection."""
    keep = {
        PK,
        index.partition_key,
        *((index.sort_key,) if index.sort_key else ()),
        *(index.projected or ()),
    }
    return float(item_size_bytes({k: v for k, v in item.items() if k in keep}))
