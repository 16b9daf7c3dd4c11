"""Pages of ``GET /streams``: which streams a listing shows, read from an index, then one batch
read of those streams. Every index query of a listing is here (a write-sharded index fans out
in :meth:`StreamListing._ids` and :meth:`StreamListing._matches`).

**By desired state** (no filter, or ``state=``): the ``by-state`` index (keys only, partition
``desired_state``, sort ``stream_id``), in stream-id order, STARTED first, then STOPPED.

**By connection state** (``connection_state=``): a scan of the ``by-holder`` index (the held
streams, the only ones with a connection state; it projects ``connection_state`` and
``desired_state``, and its partitions are the owners, so a listing loads none in particular),
in the index's own order (not id order), one desired state after the other, with a
``FilterExpression``, so only matching keys come back. DynamoDB's ``Limit`` counts the index
items *read*, not the matches, so a page is filled by reading on, chunk after chunk
(:data:`FILTER_CHUNK_ITEMS` items each), until it holds ``limit`` streams and one more match
shows that the listing goes on — or until :data:`FILTER_CHUNKS_PER_PAGE` chunks were read; then
the page is returned short (even empty) with the place where reading stopped, so one request
never reads more than ``FILTER_CHUNKS_PER_PAGE × FILTER_CHUNK_ITEMS`` index items (small ones:
keys, epoch, slot, states). A rare state in a large fleet takes a few short pages, never a long
request. A stream keeps its place while its holder keeps it (a stream taken over meanwhile may
be shown twice or not at all, as under a new owner it has a new place).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo
from streamlease.indexes import BY_OWNER, BY_STATE
from streamlease.model import Stream, is_tombstone
from streamlease.schema import (
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
    from types_boto3_dynamodb.type_defs import ScanInputTypeDef

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
    ``by-holder``, whose key needs the owner of that stream too: ``after_owner`` (None exactly
    when ``after`` is).
    """

    state: DesiredState
    after: str | None = None
    connection_state: ConnectionState | None = None
    after_owner: str | None = None


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
        empty table one empty page (a listing by connection state shows both in the index's
        order, in one pass). A stream whose state changed between the index read and
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
        """Keys of the streams in ``here.connection_state`` (and in ``partitions``), read from
        ``by-holder`` chunk by chunk until the page is full and one more match exists, or the
        chunk budget is spent (see the module docstring). One pass over the index whatever the
        desired states asked for: ``here.state`` only names the listing's first one."""
        connection = here.connection_state
        assert connection is not None
        found: list[tuple[DesiredState, str, str]] = []
        start: tuple[str, str] | None = None
        if here.after is not None and here.after_owner is not None:
            start = (here.after, here.after_owner)
        for _ in range(FILTER_CHUNKS_PER_PAGE):
            matches, start = self._matches(partitions, connection, start)
            for state, stream_id, owner in matches:
                if len(found) == limit:  # one more match: the listing goes on
                    _, last_id, last_owner = found[-1]
                    return _keys(found), ListPosition(here.state, last_id, connection, last_owner)
                found.append((state, stream_id, owner))
            if start is None:  # the index is read to its end
                return _keys(found), None
        # Budget spent: go on from where reading stopped.
        assert start is not None
        return _keys(found), ListPosition(here.state, start[0], connection, start[1])

    def _matches(
        self,
        partitions: list[DesiredState],
        connection: ConnectionState,
        start: tuple[str, str] | None,
    ) -> tuple[list[tuple[DesiredState, str, str]], tuple[str, str] | None]:
        """One Scan of ``by-holder``: (desired state, stream id, owner) of the streams in
        ``connection`` and one of ``partitions`` among the next :data:`FILTER_CHUNK_ITEMS`
        index items after ``start`` (None: from its start), and where it stopped (None: at the
        end)."""
        states = {f":s{i}": p.value for i, p in enumerate(partitions)}
        request: ScanInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_OWNER.name,
            "FilterExpression": f"#conn = :conn AND #state IN ({', '.join(states)})",
            "ProjectionExpression": "#pk, #owner, #state",
            "ExpressionAttributeNames": {
                "#pk": PK,
                "#state": _A.DESIRED_STATE,
                "#owner": _A.LEASE_OWNER,
                "#conn": _A.CONNECTION_STATE,
            },
            "ExpressionAttributeValues": dynamo.serialize({":conn": connection.value, **states}),
            "Limit": FILTER_CHUNK_ITEMS,
        }
        if start is not None:
            request["ExclusiveStartKey"] = dynamo.serialize(
                {PK: stream_key(start[0]), _A.LEASE_OWNER: start[1]}
            )
        response = dynamo.call(self._client.scan, **request)
        matches = []
        for item in response.get("Items", []):
            stream_id, owner = _index_key(item)
            state = DesiredState(str(dynamo.plain(item)[_A.DESIRED_STATE]))
            matches.append((state, stream_id, owner))
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


def _keys(found: list[tuple[DesiredState, str, str]]) -> list[_Key]:
    return [(partition, stream_id) for partition, stream_id, _ in found]


def _index_key(item: dict[str, Any]) -> tuple[str, str]:
    """(stream id, owner) of a ``by-holder`` item or key."""
    plain = dynamo.plain(item)
    return stream_id_of(str(plain[PK])), str(plain[_A.LEASE_OWNER])
