"""Pages of ``GET /streams``: which streams a listing shows, read from an index, then one batch
read of those streams. Every index query of a listing is here (a write-sharded index fans out
in :meth:`StreamListing._ids` and :meth:`StreamListing._matches`).

**By desired state** (no filter, or ``state=``): the ``by-state`` index (keys only, partition
``desired_state``, sort ``stream_id``), in stream-id order, STARTED first, then STOPPED.

**By connection state** (``connection_state=``): the ``by-state-expiry`` index, which projects
``connection_state``, read in its own key order (expiry, then stream key: not id order) with a
``FilterExpression``, so only matching keys come back. DynamoDB's ``Limit`` counts the index
items *read*, not the matches, so a page is filled by reading on, chunk after chunk
(:data:`FILTER_CHUNK_ITEMS` items each), until it holds ``limit`` streams and one more match
shows that the listing goes on — or until :data:`FILTER_CHUNKS_PER_PAGE` chunks were read; then
the page is returned short (even empty) with the place where reading stopped, so one request
never reads more than ``FILTER_CHUNKS_PER_PAGE × FILTER_CHUNK_ITEMS`` index items (small ones:
keys, owner, epoch, connection state). A rare state in a large fleet takes a few short pages,
never a long request. Held streams keep their place in that order: a session's lease never
moves its key, and a per-stream lease's expiry only grows (a stream renewed after the listing
passed it may be shown twice, never skipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo
from streamlease.model import Stream, is_tombstone
from streamlease.schema import (
    BY_STATE,
    BY_STATE_EXPIRY,
    PK,
    ConnectionState,
    DesiredState,
    StreamAttr,
    stream_attributes,
    stream_id_of,
    stream_key,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import QueryInputTypeDef

_A = StreamAttr

LISTING_ORDER: Final = (DesiredState.STARTED, DesiredState.STOPPED)
"""The desired-state partitions a listing without a ``state`` filter walks, in this order."""

FILTER_CHUNK_ITEMS: Final = 1000
"""Index items one Query of a listing by connection state reads (``Limit``)."""
FILTER_CHUNKS_PER_PAGE: Final = 8
"""Most such Queries per page; then the page is returned with the place reading stopped."""


@dataclass(frozen=True)
class ListPosition:
    """Where a listing goes on: in the desired-state partition ``state``, after stream id
    ``after`` (None: from the start of that partition).

    A listing by connection state carries its filter, ``connection_state``, and goes on in
    ``by-state-expiry``, whose key needs the expiry of that stream too: ``after_expiry``
    (None exactly when ``after`` is).
    """

    state: DesiredState
    after: str | None = None
    connection_state: ConnectionState | None = None
    after_expiry: int | None = None


@dataclass(frozen=True)
class Page:
    """One page of a listing; ``next`` is where the next page starts, None after the last."""

    streams: list[Stream]
    next: ListPosition | None


_Key = tuple[DesiredState, str]
"""A stream as an index lists it: its desired-state partition and its id."""


class StreamListing:
    """Reads pages of streams. Share one per process (the client is thread-safe)."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def page(
        self,
        state: DesiredState | None,
        limit: int,
        position: ListPosition | None,
        connection_state: ConnectionState | None = None,
    ) -> Page:
        """Up to ``limit`` streams, ``state`` ones only if given, ``connection_state`` ones
        only if given, from ``position`` (None: the start).

        Without ``state`` the STARTED partition is listed first, then STOPPED: the page that
        reaches the end of STARTED goes on with STOPPED, so a short listing is one page and an
        empty table one empty page. A stream whose state changed between the index read and
        the item read is left out (it is listed under its new state, or is gone). A page may
        hold fewer than ``limit`` streams while ``next`` is not None. ``position`` must be of
        this listing (its state partition, its connection filter). Raises
        :class:`StoreError`.
        """
        here = position or ListPosition(
            state or LISTING_ORDER[0], connection_state=connection_state
        )
        partitions = [here.state] if state is not None else list(LISTING_ORDER)
        partitions = partitions[partitions.index(here.state) :]
        if connection_state is None:
            keys, next_position = self._by_desired_state(partitions, here.after, limit)
        else:
            keys, next_position = self._by_connection_state(partitions, here, limit)
        return Page(streams=self._streams(keys, connection_state), next=next_position)

    # --- by desired state --------------------------------------------------------------------

    def _by_desired_state(
        self, partitions: list[DesiredState], after: str | None, limit: int
    ) -> tuple[list[_Key], ListPosition | None]:
        """Keys from Queries of ``by-state`` (one key more than the room left tells whether a
        partition goes on; one more Query where STARTED ends and STOPPED begins)."""
        shown: list[_Key] = []
        for partition in partitions:
            room = limit - len(shown)
            ids, last_read = self._ids(partition, after, room + 1)
            if ids and room == 0:  # the page is full and this partition has more
                return shown, ListPosition(partition)
            shown += [(partition, stream_id) for stream_id in ids[:room]]
            if len(ids) > room:
                return shown, ListPosition(partition, ids[room - 1])
            if last_read is not None:  # a read limit cut the query short
                return shown, ListPosition(partition, last_read)
            after = None
        return shown, None

    def _ids(
        self, state: DesiredState, after: str | None, limit: int
    ) -> tuple[list[str], str | None]:
        """Up to ``limit`` ids of the ``state`` partition after ``after`` (None: from the
        start), in order, and the last id read when DynamoDB stopped short of ``limit``."""
        names = {"#state": _A.DESIRED_STATE}
        values: dict[str, Any] = {":state": state.value}
        condition = "#state = :state"
        if after is not None:
            condition += " AND #id > :after"
            names["#id"] = _A.STREAM_ID
            values[":after"] = after
        response = dynamo.call(
            self._client.query,
            TableName=self._table,
            IndexName=BY_STATE.name,
            KeyConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=dynamo.serialize(values),
            Limit=limit,
        )
        ids = [str(dynamo.plain(key)[_A.STREAM_ID]) for key in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        if last is None or len(ids) >= limit:
            return ids, None
        return ids, str(dynamo.plain(last)[_A.STREAM_ID])

    # --- by connection state -----------------------------------------------------------------

    def _by_connection_state(
        self, partitions: list[DesiredState], here: ListPosition, limit: int
    ) -> tuple[list[_Key], ListPosition | None]:
        """Keys of the streams in ``here.connection_state``, read from ``by-state-expiry``
        chunk by chunk until the page is full and one more match exists, or the chunk budget
        is spent (see the module docstring)."""
        connection = here.connection_state
        assert connection is not None
        found: list[tuple[DesiredState, str, int]] = []
        chunks = 0
        start: tuple[str, int] | None = None
        if here.after is not None and here.after_expiry is not None:
            start = (here.after, here.after_expiry)
        for partition in partitions:
            while True:
                if chunks == FILTER_CHUNKS_PER_PAGE:  # budget spent: go on from here
                    after, expiry = start or (None, None)
                    return _keys(found), ListPosition(partition, after, connection, expiry)
                matches, start = self._matches(partition, connection, start)
                chunks += 1
                for stream_id, expiry in matches:
                    if len(found) == limit:  # one more match: the listing goes on
                        last_partition, last_id, last_expiry = found[-1]
                        cut = ListPosition(last_partition, last_id, connection, last_expiry)
                        return _keys(found), cut
                    found.append((partition, stream_id, expiry))
                if start is None:  # the partition is read to its end
                    break
        return _keys(found), None

    def _matches(
        self,
        partition: DesiredState,
        connection: ConnectionState,
        start: tuple[str, int] | None,
    ) -> tuple[list[tuple[str, int]], tuple[str, int] | None]:
        """One Query of ``by-state-expiry``: the (stream id, expiry) of the streams in
        ``connection`` among the next :data:`FILTER_CHUNK_ITEMS` index items of ``partition``
        after ``start`` (None: from its start), and where it stopped (None: at the end)."""
        request: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_STATE_EXPIRY.name,
            "KeyConditionExpression": "#state = :state",
            "FilterExpression": "#conn = :conn",
            "ProjectionExpression": "#pk, #exp",
            "ExpressionAttributeNames": {
                "#pk": PK,
                "#state": _A.DESIRED_STATE,
                "#exp": _A.LEASE_EXPIRES_AT_MS,
                "#conn": _A.CONNECTION_STATE,
            },
            "ExpressionAttributeValues": dynamo.serialize(
                {":state": partition.value, ":conn": connection.value}
            ),
            "Limit": FILTER_CHUNK_ITEMS,
        }
        if start is not None:
            request["ExclusiveStartKey"] = dynamo.serialize(
                {
                    PK: stream_key(start[0]),
                    _A.DESIRED_STATE: partition.value,
                    _A.LEASE_EXPIRES_AT_MS: start[1],
                }
            )
        response = dynamo.call(self._client.query, **request)
        matches = [_index_key(item) for item in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return matches, None if last is None else _index_key(last)

    # --- items -------------------------------------------------------------------------------

    def _streams(
        self, keys: list[_Key], connection_state: ConnectionState | None = None
    ) -> list[Stream]:
        """The items of ``keys`` (state partition, stream id) still in that state (and in
        ``connection_state``, when given), in order."""
        if not keys:
            return []
        found = dynamo.batch_get(
            self._client,
            self._table,
            [{PK: stream_key(stream_id)} for _, stream_id in keys],
            [PK, *stream_attributes()],
        )
        by_key = {str(item[PK]): item for item in found if not is_tombstone(item)}
        streams = []
        for state, stream_id in keys:
            item = by_key.get(stream_key(stream_id))
            if item is None or item.get(_A.DESIRED_STATE) != state.value:
                continue
            stream = Stream.from_item(item)
            if connection_state is None or stream.connection_state is connection_state:
                streams.append(stream)
        return streams


def _keys(found: list[tuple[DesiredState, str, int]]) -> list[_Key]:
    return [(partition, stream_id) for partition, stream_id, _ in found]


def _index_key(item: dict[str, Any]) -> tuple[str, int]:
    """(stream id, expiry) of a ``by-state-expiry`` item or key."""
    plain = dynamo.plain(item)
    return stream_id_of(str(plain[PK])), int(plain[_A.LEASE_EXPIRES_AT_MS])
