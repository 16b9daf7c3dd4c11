"""Stream items written straight into the table, as the control plane and workers leave them."""

from __future__ import annotations

from typing import Any

from streamlease import dynamo
from streamlease.indexes import expiry_shard
from streamlease.model import iso_ms
from streamlease.schema import PK, SESSION_HELD_MS, DesiredState, Liveness, StreamAttr, stream_key
from streamlease.seqs import NOTHING_DELIVERED


def put_stream(
    dynamodb: Any,
    table: str,
    stream_id: str,
    *,
    state: DesiredState = DesiredState.STARTED,
    owner: str | None = None,
    expires_ms: int = 0,
    epoch: int = 0,
    last_seq: int = NOTHING_DELIVERED,
    takeovers: int = 0,
    updated_ms: int | None = None,
    liveness: Liveness = Liveness.SESSION,
) -> None:
    """Write a stream item the way the control plane creates it, optionally leased by ``owner``:
    held through its session (``expires_ms`` = ``SESSION_HELD_MS``: a checkpoint slot, out of
    the orphan index) or by a per-stream lease (a STARTED one in the orphan index, keyed for
    ``liveness``)."""
    item: dict[str, Any] = {
        PK: stream_key(stream_id),
        StreamAttr.STREAM_ID: stream_id,
        StreamAttr.DESIRED_STATE: state.value,
        StreamAttr.WS_URL: f"wss://upstream.example/{stream_id}",
        StreamAttr.LEASE_EXPIRES_AT_MS: expires_ms,
        StreamAttr.LEASE_EPOCH: epoch,
        StreamAttr.LAST_SEQ: last_seq,
        StreamAttr.GENERATION: 1,
        StreamAttr.TAKEOVERS: takeovers,
    }
    if updated_ms is not None:
        item[StreamAttr.UPDATED_AT] = iso_ms(updated_ms)
    session_held = bool(owner) and expires_ms == SESSION_HELD_MS
    if owner:
        item[StreamAttr.LEASE_OWNER] = owner
    if session_held:
        item[StreamAttr.LEASE_SLOT] = 0
    elif state is DesiredState.STARTED:
        item[StreamAttr.EXPIRY_SHARD] = expiry_shard(stream_id, liveness)
    dynamodb.put_item(TableName=table, Item=dynamo.serialize(item))


def set_attributes(dynamodb: Any, table: str, stream_id: str, values: dict[str, Any]) -> None:
    """Set attributes of a stream item as its holder would (connection state, progress, ...)."""
    names = {f"#a{i}": name for i, name in enumerate(values)}
    dynamodb.update_item(
        TableName=table,
        Key={PK: {"S": stream_key(stream_id)}},
        UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(values))),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=dynamo.serialize(
            {f":v{i}": value for i, value in enumerate(values.values())}
        ),
    )


class Handoffs:
    """A handoff sender that records the streams it was asked to hand off (and always sends)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_handoff(self, stream_id: str, generation: int, **_: Any) -> bool:
        self.sent.append(stream_id)
        return True
