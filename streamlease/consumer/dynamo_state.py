"""Watermarks in DynamoDB: one item per (consumer, shard), written whole by each commit with
one conditional ``PutItem`` (the shell around :mod:`.state`; names from
:mod:`streamlease.schema`).

As Powertools' idempotency store does, the condition is built from named clauses, attribute
names reach DynamoDB only as ``#placeholders``, a failed condition returns the item as it was
(``ReturnValuesOnConditionCheckFailure``) and ``ClientError`` becomes a domain error here
(:class:`~streamlease.errors.WatermarkConflict`, :class:`~streamlease.errors.StoreError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo
from streamlease.consumer.codec import decode_marks, encode_marks
from streamlease.consumer.state import ShardWatermarks
from streamlease.errors import StoreError, WatermarkConflict
from streamlease.schema import (
    WATERMARK_PK,
    WatermarkAttr,
    watermark_key,
    watermark_table_kwargs,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

_NAMES: Final = {
    "#pk": WATERMARK_PK,
    "#version": WatermarkAttr.VERSION,
}
# Named condition clauses: each says one thing.
_NEW: Final = "attribute_not_exists(#pk)"
_AT_VERSION: Final = "#version = :expected"


class DynamoWatermarks:
    """A :class:`~.state.WatermarkStore` on a DynamoDB table made by
    :func:`create_watermark_table` (or the CDK construct, from the same names).

    ``namespace`` names the consuming application and the stream it reads (each keeps its own
    watermarks). ``client`` is a low-level DynamoDB client (thread-safe, shared).
    ``last_item``: the item of the last write, as sent (to measure what a commit costs)."""

    def __init__(self, client: DynamoDBClient, table: str, namespace: str) -> None:
        self._client = client
        self._table = table
        self._namespace = namespace
        self.writes = 0
        self.last_item: dict[str, Any] | None = None

    def load(self, shard_id: str) -> ShardWatermarks | None:
        """The shard's watermarks (a strongly consistent ``GetItem``), or None. Raises
        :class:`~streamlease.errors.StoreError` when DynamoDB does not answer or the item does
        not decode."""
        answer = dynamo.call(
            self._client.get_item,
            TableName=self._table,
            Key=dynamo.serialize({WATERMARK_PK: watermark_key(self._namespace, shard_id)}),
            ConsistentRead=True,
        )
        item = answer.get("Item")
        if not item:
            return None
        return _from_item(shard_id, dynamo.plain(item))

    def save(self, state: ShardWatermarks) -> None:
        """One ``PutItem`` of ``state``, conditional on the stored version being the one before
        it. Raises :class:`~streamlease.errors.WatermarkConflict` (with the version found) when
        it is not, :class:`~streamlease.errors.StoreError` when unanswered."""
        expected = state.version - 1
        item: dict[str, Any] = {
            WATERMARK_PK: watermark_key(self._namespace, state.shard_id),
            WatermarkAttr.VERSION: state.version,
            WatermarkAttr.MARKS: encode_marks(state.marks),
        }
        if state.sequence_number is not None:
            item[WatermarkAttr.SEQUENCE_NUMBER] = state.sequence_number
        sent = dynamo.serialize(item)
        try:
            condition: dict[str, Any] = (
                {"ConditionExpression": _NEW}
                if expected == 0
                else {
                    "ConditionExpression": _AT_VERSION,
                    "ExpressionAttributeValues": dynamo.serialize({":expected": expected}),
                }
            )
            dynamo.call(
                self._client.put_item,
                TableName=self._table,
                Item=sent,
                ExpressionAttributeNames=dynamo.placeholders(
                    _NAMES, condition["ConditionExpression"]
                ),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **condition,
            )
        except dynamo.ConditionFailed as failed:
            found = failed.old.get(WatermarkAttr.VERSION) if failed.old else None
            raise WatermarkConflict(
                state.shard_id, expected, int(found) if found is not None else 0
            ) from None
        self.writes += 1
        self.last_item = sent


def _from_item(shard_id: str, item: dict[str, Any]) -> ShardWatermarks:
    try:
        marks = decode_marks(bytes(item[WatermarkAttr.MARKS]))
        version = int(item[WatermarkAttr.VERSION])
    except (KeyError, ValueError, TypeError) as exc:
        raise StoreError(f"watermark item of shard {shard_id!r} does not decode: {exc}") from None
    sequence_number = item.get(WatermarkAttr.SEQUENCE_NUMBER)
    return ShardWatermarks(
        shard_id, version, marks, str(sequence_number) if sequence_number else None
    )


def create_watermark_table(client: DynamoDBClient, table_name: str) -> None:
    """Create the watermark table (on-demand, key :data:`~streamlease.schema.WATERMARK_PK`)
    for the local stack and tests, and wait until it is active; a table that exists already is
    kept. Raises :class:`~streamlease.errors.StoreError` when DynamoDB refuses."""
    try:
        dynamo.call(client.create_table, **watermark_table_kwargs(table_name))
    except StoreError as exc:
        if "ResourceInUseException" not in str(exc):
            raise
    client.get_waiter("table_exists").wait(TableName=table_name)
