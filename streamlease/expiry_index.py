"""A stream's entry in the orphan index (``by-shard-expiry``), kept in line with its state.

The entry's key, :attr:`~streamlease.schema.StreamAttr.EXPIRY_SHARD`, is present exactly while
the stream is STARTED and no session holds it (free, or held by a per-stream lease). The writes
that change this say so in the same request where they can: an acquire for a session removes
it, a release or a create sets it, a stop removes it. Where a write cannot know the state it
leaves (a release of a stream that was stopped meanwhile, a start while a session still holds
it), :func:`align` follows with one conditional write read from the answer. The entry is an
index hint only: no condition of the lease protocol reads it, so a late or failed alignment
costs at most a wasted acquire attempt (which aligns it again) or a reconcile round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo
from streamlease.indexes import expiry_shard, shard_key
from streamlease.schema import PK, DesiredState, Liveness, StreamAttr, stream_key

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

_NAMES: Final = {
    "#shard": StreamAttr.EXPIRY_SHARD,
    "#state": StreamAttr.DESIRED_STATE,
    "#slot": StreamAttr.LEASE_SLOT,
}
_BELONGS: Final = "#state = :started AND attribute_not_exists(#slot)"


def belongs(item: Mapping[str, Any]) -> bool:
    """Whether a stream item (plain values) should have an entry: STARTED, not attached to a
    session (no checkpoint slot), not a tombstone."""
    return item.get(StreamAttr.DESIRED_STATE) == DesiredState.STARTED and (
        item.get(StreamAttr.LEASE_SLOT) is None
    )


def align(
    client: DynamoDBClient, table: str, item: Mapping[str, Any], liveness: Liveness
) -> str | None:
    """Add, remove or re-key ``item``'s entry if it does not match :func:`belongs` and the
    fleet's ``liveness`` (``item``: the stream as a write just left it, plain values). A
    per-stream fleet re-keys every entry outside its one shard; a session fleet only those in
    the per-stream shard, as any of its own shards serves it. The write is conditional on the
    state it corrects, so a change that got in first wins. Returns what it did (``added``,
    ``removed``, ``rekeyed``) or None; raises :class:`StoreError` when unanswered."""
    stream_id = item.get(StreamAttr.STREAM_ID)
    if not isinstance(stream_id, str):
        return None
    has = item.get(StreamAttr.EXPIRY_SHARD)
    wanted = expiry_shard(stream_id, liveness)
    values: dict[str, Any] = {":started": DesiredState.STARTED.value}
    if not belongs(item):
        if has is None:
            return None
        done, update, condition = (
            "removed",
            "REMOVE #shard",
            f"attribute_exists(#shard) AND NOT ({_BELONGS})",
        )
    elif has is None:
        done, update = "added", "SET #shard = :shard"
        condition = f"attribute_not_exists(#shard) AND {_BELONGS}"
        values[":shard"] = wanted
    elif has != wanted and (liveness is Liveness.STREAM or has == shard_key(0)):
        # Keyed by a fleet of the other liveness mode. A session fleet's other shards all
        # serve it (it scans), whatever shard count wrote them: no rewrite for those.
        done, update = "rekeyed", "SET #shard = :shard"
        condition = f"#shard = :old AND {_BELONGS}"
        values.update({":shard": wanted, ":old": has})
    else:
        return None
    try:
        dynamo.update(client, table, {PK: stream_key(stream_id)}, update, condition, _NAMES, values)
    except dynamo.ConditionFailed:
        return None  # changed meanwhile: the write that changed it set the entry right
    return done
