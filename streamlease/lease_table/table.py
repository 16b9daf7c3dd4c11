"""What every part of the lease store shares: the client, the table, and one conditional write,
one read or one query of a stream item."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from streamlease import dynamo, expiry_index
from streamlease.errors import StoreError
from streamlease.lease_table.layout import _NAMES
from streamlease.schema import (
    PK,
    Liveness,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.literals import ReturnValueType
    from types_boto3_dynamodb.type_defs import QueryInputTypeDef


class LeaseTable:
    """The stream items of one table, as the parts of :class:`~streamlease.lease_store.LeaseStore`
    reach them (its constructor sets these)."""

    _client: DynamoDBClient
    _table: str
    _skew_ms: int
    _clock_ms: Callable[[], int]
    _liveness: Liveness

    # --- plumbing ----------------------------------------------------------------------------

    def _align(self, item: Mapping[str, Any]) -> None:
        """Keep the orphan-index entry in line after a write (:func:`expiry_index.align`);
        unanswered, the next acquire attempt through a stale entry aligns it."""
        try:
            expiry_index.align(self._client, self._table, item, self._liveness)
        except StoreError:
            return

    def _key(self, pk: str) -> dict[str, Any]:
        return {PK: {"S": pk}}

    def _get(self, pk: str, *, consistent: bool) -> dict[str, Any] | None:
        response = dynamo.call(
            self._client.get_item,
            TableName=self._table,
            Key=self._key(pk),
            ConsistentRead=consistent,
        )
        item = response.get("Item")
        return None if item is None else dynamo.plain(item)

    def _query(self, query: QueryInputTypeDef, limit: int | None) -> Iterator[dict[str, Any]]:
        return dynamo.items(self._client.query, query, limit=limit)

    def _update(
        self,
        pk: str,
        update: str,
        condition: str,
        values: Mapping[str, Any],
        returns: ReturnValueType = "NONE",
    ) -> dict[str, Any]:
        """One conditional UpdateItem (see :func:`dynamo.update`)."""
        return dynamo.update(
            self._client,
            self._table,
            {PK: pk},
            update,
            condition,
            _NAMES,
            values,
            returns=returns,
        )
