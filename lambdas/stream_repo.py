"""Control-plane writes and reads of stream items: create, start, stop, delete, get, list.

Every write is one conditional request with ``ReturnValuesOnConditionCheckFailure=ALL_OLD``, so a
failed condition says why without a second read, and concurrent callers cannot lose an update:
the generation is incremented by DynamoDB, never read-modified-written here. Lease fields are
never touched — a holder learns about a stop through its renewal condition (DESIGN §4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from streamlease import dynamo, rules
from streamlease.errors import StateConflict, StreamNotFound
from streamlease.lease_store import wall_ms
from streamlease.model import Stream, iso_ms
from streamlease.schema import PK, STREAM_PREFIX, DesiredState, StreamAttr, stream_key

_A = StreamAttr
_MAX_SCAN_CALLS: Final = 8
"""Most Scan calls one list request makes before it returns a (possibly short) page."""


class StreamConflict(StateConflict):
    """The change cannot be made in the stream's current state; ``field`` names the culprit."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Page:
    """One page of a listing; ``next_key`` is the plain ``ExclusiveStartKey`` or None at the end."""

    streams: list[Stream]
    next_key: dict[str, str] | None


class StreamRepo:
    """Stream items as the API sees them. Share one per process (the client is thread-safe)."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        clock_skew_ms: int = 1000,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        """``client``: a boto3 DynamoDB client; ``clock_ms``: wall milliseconds (tests pin it)."""
        self._client = client
        self._table = table_name
        self._skew_ms = clock_skew_ms
        self._clock_ms = clock_ms

    # --- writes ------------------------------------------------------------------------------

    def create(self, stream_id: str, ws_url: str, actor: str) -> tuple[Stream, bool]:
        """Create ``stream_id`` STARTED at generation 1; returns ``(stream, created)``.

        An existing stream with the same ``ws_url`` is returned unchanged with ``created``
        False (a retried create, whatever its state). Raises :class:`StreamConflict` (field
        ``ws_url``) when the id exists with another URL, :class:`StoreError` when unanswered.
        """
        now = iso_ms(self._clock_ms())
        item: dict[str, Any] = {
            PK: stream_key(stream_id),
            _A.STREAM_ID: stream_id,
            _A.DESIRED_STATE: DesiredState.STARTED.value,
            _A.WS_URL: ws_url,
            _A.LEASE_EXPIRES_AT_MS: 0,
            _A.LEASE_EPOCH: 0,
            _A.LAST_SEQ: 0,
            _A.GENERATION: 1,
            _A.TAKEOVERS: 0,
            _A.CREATED_AT: now,
            _A.UPDATED_AT: now,
            _A.CREATED_BY: actor,
            _A.UPDATED_BY: actor,
        }
        try:
            self._request(
                "put_item",
                Item=dynamo.serialize(item),
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": PK},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except dynamo.ConditionFailed as failed:
            old = failed.old
            if old is None:  # deleted again in between: nothing to compare with
                raise StreamConflict(
                    f"stream {stream_id!r} is being changed concurrently; retry", "id"
                ) from None
            existing = Stream.from_item(old)
            if existing.ws_url != ws_url:
                raise StreamConflict(
                    f"stream {stream_id!r} already exists with a different ws_url; "
                    "delete it first to change the URL",
                    "ws_url",
                ) from None
            return existing, False
        return Stream.from_item(item), True

    def set_desired_state(
        self, stream_id: str, target: DesiredState, actor: str
    ) -> tuple[Stream, bool]:
        """Move the stream to ``target`` with generation + 1; returns ``(stream, changed)``.

        Already in ``target``: the stream is returned unchanged with ``changed`` False
        (idempotent). Of concurrent callers exactly one wins each transition. Raises
        :class:`StreamNotFound`, :class:`StoreError`.
        """
        other = DesiredState.STOPPED if target is DesiredState.STARTED else DesiredState.STARTED
        try:
            attributes = self._request(
                "update_item",
                Key=self._key(stream_id),
                UpdateExpression=(
                    "SET #state = :target, #gen = #gen + :one, #uat = :now, #uby = :actor"
                ),
                ConditionExpression="attribute_exists(#pk) AND #state = :other",
                ExpressionAttributeNames={
                    "#pk": PK,
                    "#state": _A.DESIRED_STATE,
                    "#gen": _A.GENERATION,
                    "#uat": _A.UPDATED_AT,
                    "#uby": _A.UPDATED_BY,
                },
                ExpressionAttributeValues=dynamo.serialize(
                    {
                        ":target": target.value,
                        ":other": other.value,
                        ":one": 1,
                        ":now": iso_ms(self._clock_ms()),
                        ":actor": actor,
                    }
                ),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            ).get("Attributes", {})
        except dynamo.ConditionFailed as failed:
            if failed.old is None:
                raise StreamNotFound(stream_id) from None
            return Stream.from_item(failed.old), False
        return Stream.from_item(dynamo.plain(attributes)), True

    def delete(self, stream_id: str) -> None:
        """Delete a STOPPED stream that nobody holds (no owner, or an owner whose lease lapsed).

        Raises :class:`StreamNotFound`, :class:`StreamConflict` (STARTED, or still leased),
        :class:`StoreError`.
        """
        now = self._clock_ms()
        try:
            self._request(
                "delete_item",
                Key=self._key(stream_id),
                ConditionExpression=(
                    "attribute_exists(#pk) AND #state = :stopped"
                    " AND (attribute_not_exists(#owner) OR #exp < :cutoff)"
                ),
                ExpressionAttributeNames={
                    "#pk": PK,
                    "#state": _A.DESIRED_STATE,
                    "#owner": _A.LEASE_OWNER,
                    "#exp": _A.LEASE_EXPIRES_AT_MS,
                },
                ExpressionAttributeValues=dynamo.serialize(
                    {
                        ":stopped": DesiredState.STOPPED.value,
                        ":cutoff": rules.acquire_cutoff_ms(now, self._skew_ms),
                    }
                ),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except dynamo.ConditionFailed as failed:
            if failed.old is None:
                raise StreamNotFound(stream_id) from None
            stream = Stream.from_item(failed.old)
            if stream.desired_state is DesiredState.STARTED:
                raise StreamConflict(
                    f"stream {stream_id!r} is STARTED; stop it before deleting it", "id"
                ) from None
            raise StreamConflict(
                f"stream {stream_id!r} is still held by {stream.owner} "
                f"(lease ends in {max(0, stream.expires_at_ms - now)} ms); "
                "retry once the owner has released it",
                "id",
            ) from None

    # --- reads -------------------------------------------------------------------------------

    def get(self, stream_id: str) -> Stream:
        """The stream, read consistently. Raises :class:`StreamNotFound`, :class:`StoreError`."""
        response = self._request("get_item", Key=self._key(stream_id), ConsistentRead=True)
        item = response.get("Item")
        if item is None:
            raise StreamNotFound(stream_id)
        return Stream.from_item(dynamo.plain(item))

    def page(
        self, state: DesiredState | None, limit: int, start_key: Mapping[str, str] | None
    ) -> Page:
        """Up to ``limit`` streams (in ``state`` if given), continuing after ``start_key``.

        A Scan filtered to stream items: its order does not change as leases renew, so paging
        neither skips nor repeats streams. A page may hold fewer than ``limit`` streams (each
        request reads at most a bounded amount) while ``next_key`` is not None.
        """
        names = {"#pk": PK}
        values: dict[str, Any] = {":prefix": STREAM_PREFIX}
        condition = "begins_with(#pk, :prefix)"
        if state is not None:
            names["#state"] = _A.DESIRED_STATE
            values[":state"] = state.value
            condition += " AND #state = :state"
        request: dict[str, Any] = {
            "FilterExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": dynamo.serialize(values),
        }
        if start_key is not None:
            request["ExclusiveStartKey"] = dynamo.serialize(start_key)
        streams: list[Stream] = []
        last_key: dict[str, Any] | None = None
        for _ in range(_MAX_SCAN_CALLS):
            request["Limit"] = limit - len(streams)
            response = self._request("scan", **request)
            streams += [Stream.from_item(dynamo.plain(i)) for i in response.get("Items", [])]
            last_key = response.get("LastEvaluatedKey")
            if not last_key or len(streams) >= limit:
                break
            request["ExclusiveStartKey"] = last_key
        next_key = None if not last_key else {k: str(v) for k, v in dynamo.plain(last_key).items()}
        return Page(streams=streams, next_key=next_key)

    # --- plumbing ----------------------------------------------------------------------------

    def _key(self, stream_id: str) -> dict[str, Any]:
        return {PK: {"S": stream_key(stream_id)}}

    def _request(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One DynamoDB call on the table (errors as :func:`streamlease.dynamo.call` says)."""
        return dynamo.call(self._client, operation, TableName=self._table, **kwargs)
