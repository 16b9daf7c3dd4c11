"""Control-plane writes and reads of stream items: create, start, stop, change, delete, get
(listing is :mod:`lambdas.stream_listing`).

Every write is one conditional request with ``ReturnValuesOnConditionCheckFailure=ALL_OLD``, so a
failed condition says why without a second read, and concurrent callers cannot lose an update:
the generation is incremented by DynamoDB, never read-modified-written here. Lease fields of a
live stream are never touched — a holder learns about a stop through its renewal condition
(architecture §4).

Delete leaves a *tombstone* (``schema.TOMBSTONE_KEEPS``): the item keeps ``lease_epoch`` and
``generation`` and gets ``deleted_at``; everything else goes, so it is in no index and reads as
missing. Creating the id again turns the tombstone back into a stream whose epoch and
generation continue above the old ones, so consumers that drop records of an older epoch never
drop the new stream's records, and a command or holder of the old stream can never match it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo, expiry_index, rules
from streamlease.errors import StateConflict, StreamNotFound
from streamlease.indexes import expiry_shard
from streamlease.lease_store import wall_ms
from streamlease.model import Stream, is_tombstone, iso_ms
from streamlease.profile import Profile
from streamlease.schema import (
    PK,
    TOMBSTONE_KEEPS,
    DesiredState,
    Liveness,
    StreamAttr,
    stream_attributes,
    stream_key,
)
from streamlease.seqs import NOTHING_DELIVERED

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

_A = StreamAttr

_NEW_STREAM_EPOCH_BASE: Final = -1
"""``if_not_exists(lease_epoch, -1) + 1``: 0 for a new id, the tombstone's epoch + 1 otherwise."""

_CHANGE_ATTEMPTS: Final = 3
"""Reads and conditional writes a change in place tries while others change the stream."""

_TOMBSTONE_REMOVES: Final = tuple(a for a in stream_attributes() if a not in TOMBSTONE_KEEPS)


class StreamConflict(StateConflict):
    """The change cannot be made in the stream's current state; ``field`` names the culprit."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def _numbered(profile: Mapping[str, Any] | None) -> bool:
    """Whether a stored profile has the worker number the messages (``seq: none``)."""
    return Profile.from_item(profile).seq_path is None


class StreamRepo:
    """Stream items as the API sees them. Share one per process (the client is thread-safe)."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        clock_skew_ms: int = 1000,
        clock_ms: Callable[[], int] = wall_ms,
        liveness: Liveness = Liveness.SESSION,
    ) -> None:
        """``client``: a boto3 DynamoDB client; ``clock_ms``: wall milliseconds (tests pin it);
        ``liveness``: the fleet's mode (it decides a started stream's orphan-index shard)."""
        self._client = client
        self._table = table_name
        self._skew_ms = clock_skew_ms
        self._clock_ms = clock_ms
        self._liveness = liveness

    # --- writes ------------------------------------------------------------------------------

    def create(
        self,
        stream_id: str,
        ws_url: str,
        actor: str,
        profile: Mapping[str, Any] | None = None,
    ) -> tuple[Stream, bool]:
        """Create ``stream_id`` STARTED with its connection ``profile`` (stored form, see
        :meth:`streamlease.profile.Profile.to_item`; None or empty: the default); returns
        ``(stream, created)``.

        One conditional write, taken only where there is no item or a tombstone: a new id
        starts at epoch 0 and generation 1; a deleted id continues at the tombstone's epoch + 1
        and generation + 1. Either way ``last_seq`` is
        :data:`~streamlease.seqs.NOTHING_DELIVERED` (the new epoch tells a re-created stream's
        records apart). An
        existing stream with the same ``ws_url`` and profile is returned unchanged with
        ``created`` False (a retried create, whatever its state). Raises
        :class:`StreamConflict` (field ``ws_url`` or ``profile``) when the id exists with
        another URL or profile, :class:`StoreError` when unanswered.
        """
        now = iso_ms(self._clock_ms())
        profile = dict(profile) if profile else None
        profile_update = " #profile = :profile," if profile else ""
        profile_remove = "" if profile else ", #profile"
        values: dict[str, Any] = {
            ":id": stream_id,
            ":started": DesiredState.STARTED.value,
            ":url": ws_url,
            ":zero": 0,
            ":one": 1,
            ":nothing": NOTHING_DELIVERED,
            ":epoch_base": _NEW_STREAM_EPOCH_BASE,
            ":now": now,
            ":actor": actor,
            ":shard": expiry_shard(stream_id, self._liveness),
        }
        if profile:
            values[":profile"] = profile
        try:
            attributes = dynamo.call(
                self._client.update_item,
                TableName=self._table,
                Key=self._key(stream_id),
                UpdateExpression=(
                    "SET #id = :id, #state = :started, #url = :url, #exp = :zero, #seq = :nothing,"
                    " #shard = :shard,"
                    f"{profile_update}"
                    " #takeovers = :zero, #epoch = if_not_exists(#epoch, :epoch_base) + :one,"
                    " #gen = if_not_exists(#gen, :zero) + :one, #cat = :now, #uat = :now,"
                    " #cby = :actor, #uby = :actor"
                    f" REMOVE #deleted{profile_remove}"
                ),
                ConditionExpression="attribute_not_exists(#pk) OR attribute_exists(#deleted)",
                ExpressionAttributeNames={
                    "#pk": PK,
                    "#deleted": _A.DELETED_AT,
                    "#id": _A.STREAM_ID,
                    "#state": _A.DESIRED_STATE,
                    "#url": _A.WS_URL,
                    "#exp": _A.LEASE_EXPIRES_AT_MS,
                    "#seq": _A.LAST_SEQ,
                    "#takeovers": _A.TAKEOVERS,
                    "#epoch": _A.LEASE_EPOCH,
                    "#gen": _A.GENERATION,
                    "#cat": _A.CREATED_AT,
                    "#uat": _A.UPDATED_AT,
                    "#cby": _A.CREATED_BY,
                    "#uby": _A.UPDATED_BY,
                    "#profile": _A.PROFILE,
                    "#shard": _A.EXPIRY_SHARD,
                },
                ExpressionAttributeValues=dynamo.serialize(values),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            ).get("Attributes", {})
        except dynamo.ConditionFailed as failed:
            old = failed.old
            if old is None or is_tombstone(old):  # the condition held a moment ago: a race
                raise StreamConflict(
                    f"stream {stream_id!r} is being changed concurrently; retry", "id"
                ) from None
            existing = Stream.from_item(old)
            if existing.ws_url != ws_url:
                raise StreamConflict(
                    f"stream {stream_id!r} already exists with a different ws_url; change it "
                    f"in place with PATCH /streams/{stream_id} "
                    f"(streamlease set {stream_id} --url URL)",
                    "ws_url",
                ) from None
            if (existing.profile or None) != profile:
                raise StreamConflict(
                    f"stream {stream_id!r} already exists with a different profile; change it in "
                    f"place with PATCH /streams/{stream_id} (streamlease set {stream_id} and the "
                    "profile flags)",
                    "profile",
                ) from None
            return existing, False
        return Stream.from_item(dynamo.plain(attributes)), True

    def set_desired_state(
        self, stream_id: str, target: DesiredState, actor: str
    ) -> tuple[Stream, bool]:
        """Move the stream to ``target`` with generation + 1; returns ``(stream, changed)``.

        Already in ``target``: the stream is returned unchanged with ``changed`` False
        (idempotent). Of concurrent callers exactly one wins each transition. Raises
        :class:`StreamNotFound` (no item, or a tombstone), :class:`StoreError`.
        """
        other = DesiredState.STOPPED if target is DesiredState.STARTED else DesiredState.STARTED
        values = {
            ":target": target.value,
            ":other": other.value,
            ":one": 1,
            ":now": iso_ms(self._clock_ms()),
            ":actor": actor,
        }
        # The orphan index: a started stream enters it, a stopped one leaves (one still held
        # through a session is taken out again below: its holder releases it into the index).
        if target is DesiredState.STARTED:
            values[":shard"] = expiry_shard(stream_id, self._liveness)
        try:
            attributes = dynamo.call(
                self._client.update_item,
                TableName=self._table,
                Key=self._key(stream_id),
                UpdateExpression=(
                    "SET #state = :target, #gen = #gen + :one, #uat = :now, #uby = :actor"
                    + (", #shard = :shard" if target is DesiredState.STARTED else " REMOVE #shard")
                ),
                ConditionExpression="attribute_exists(#pk) AND #state = :other",
                ExpressionAttributeNames={
                    "#pk": PK,
                    "#state": _A.DESIRED_STATE,
                    "#gen": _A.GENERATION,
                    "#uat": _A.UPDATED_AT,
                    "#uby": _A.UPDATED_BY,
                    "#shard": _A.EXPIRY_SHARD,
                },
                ExpressionAttributeValues=dynamo.serialize(values),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            ).get("Attributes", {})
        except dynamo.ConditionFailed as failed:
            if failed.old is None or is_tombstone(failed.old):
                raise StreamNotFound(stream_id) from None
            return Stream.from_item(failed.old), False
        item = dynamo.plain(attributes)
        expiry_index.align(self._client, self._table, item, self._liveness)
        return Stream.from_item(item), True

    def change(
        self,
        stream_id: str,
        actor: str,
        *,
        ws_url: str | None = None,
        profile: Mapping[str, Any] | None = None,
    ) -> tuple[Stream, bool]:
        """Change the URL and/or the connection profile (stored form; ``{}``: back to the
        default) of a stream in place, with generation + 1; returns ``(stream, changed)``.

        The lease, its epoch and ``last_seq`` stay: the holder sees the new generation and
        reconnects with the new settings from its checkpoint. A change to what is already
        stored changes nothing (``changed`` False, no generation bump). The write is
        conditional on the generation read just before, so a concurrent stop, start or
        change is never overwritten unseen (then the read and write are tried again). Raises
        :class:`StreamNotFound`, :class:`StreamConflict` (still racing after a few tries),
        :class:`StoreError`.
        """
        for _ in range(_CHANGE_ATTEMPTS):
            current = self.get(stream_id)
            url = current.ws_url if ws_url is None else ws_url
            stored = dict(current.profile) if current.profile else None
            wanted = stored if profile is None else (dict(profile) or None)
            if url == current.ws_url and wanted == stored:
                return current, False
            if current.last_seq != NOTHING_DELIVERED and _numbered(stored) != _numbered(wanted):
                raise StreamConflict(
                    f"stream {stream_id!r} has delivered messages: its seq cannot change between"
                    " none and a path in place (its checkpoint counts in one numbering, the"
                    " upstream's or the worker's); start the feed under a new stream id",
                    "profile",
                )
            values: dict[str, Any] = {
                ":url": url,
                ":gen": current.generation,
                ":one": 1,
                ":now": iso_ms(self._clock_ms()),
                ":actor": actor,
            }
            update = "SET #url = :url, #gen = #gen + :one, #uat = :now, #uby = :actor"
            if wanted:
                values[":profile"] = wanted
                update += ", #profile = :profile"
            else:
                update += " REMOVE #profile"
            try:
                attributes = dynamo.call(
                    self._client.update_item,
                    TableName=self._table,
                    Key=self._key(stream_id),
                    UpdateExpression=update,
                    ConditionExpression=(
                        "attribute_exists(#pk) AND attribute_not_exists(#deleted) AND #gen = :gen"
                    ),
                    ExpressionAttributeNames={
                        "#pk": PK,
                        "#deleted": _A.DELETED_AT,
                        "#url": _A.WS_URL,
                        "#gen": _A.GENERATION,
                        "#uat": _A.UPDATED_AT,
                        "#uby": _A.UPDATED_BY,
                        "#profile": _A.PROFILE,
                    },
                    ExpressionAttributeValues=dynamo.serialize(values),
                    ReturnValues="ALL_NEW",
                ).get("Attributes", {})
            except dynamo.ConditionFailed:
                continue  # changed (or deleted) since the read: read again
            return Stream.from_item(dynamo.plain(attributes)), True
        raise StreamConflict(f"stream {stream_id!r} is being changed concurrently; retry", "id")

    def delete(self, stream_id: str) -> None:
        """Delete a STOPPED stream that nobody holds (no owner, or an owner whose lease lapsed),
        leaving its tombstone.

        One conditional write: every attribute but ``TOMBSTONE_KEEPS`` is removed and
        ``deleted_at`` set. Raises :class:`StreamNotFound` (no item, or a tombstone already),
        :class:`StreamConflict` (STARTED, or still leased), :class:`StoreError`.
        """
        now = self._clock_ms()
        removed = {f"#r{i}": name for i, name in enumerate(_TOMBSTONE_REMOVES)}
        try:
            dynamo.call(
                self._client.update_item,
                TableName=self._table,
                Key=self._key(stream_id),
                UpdateExpression=f"SET #deleted = :deleted_at REMOVE {', '.join(removed)}",
                ConditionExpression=(
                    "#state = :stopped AND (attribute_not_exists(#owner) OR #exp < :cutoff)"
                ),
                ExpressionAttributeNames={
                    **removed,
                    "#deleted": _A.DELETED_AT,
                    "#state": _A.DESIRED_STATE,
                    "#owner": _A.LEASE_OWNER,
                    "#exp": _A.LEASE_EXPIRES_AT_MS,
                },
                ExpressionAttributeValues=dynamo.serialize(
                    {
                        ":deleted_at": iso_ms(now),
                        ":stopped": DesiredState.STOPPED.value,
                        ":cutoff": rules.acquire_cutoff_ms(now, self._skew_ms),
                    }
                ),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except dynamo.ConditionFailed as failed:
            if failed.old is None or is_tombstone(failed.old):
                raise StreamNotFound(stream_id) from None
            stream = Stream.from_item(failed.old)
            if stream.desired_state is DesiredState.STARTED:
                raise StreamConflict(
                    f"stream {stream_id!r} is STARTED; stop it before deleting it "
                    f"(streamlease stop {stream_id}, then streamlease rm --wait {stream_id})",
                    "id",
                ) from None
            held = (
                "its owner is releasing it"
                if stream.held_by_session
                else f"lease ends in {max(0, stream.expires_at_ms - now)} ms"
            )
            raise StreamConflict(
                f"stream {stream_id!r} is still held by {stream.owner} ({held}); "
                f"retry once the owner has released it (streamlease rm --wait {stream_id} does)",
                "id",
            ) from None

    # --- reads -------------------------------------------------------------------------------

    def get(self, stream_id: str) -> Stream:
        """The stream, read consistently. Raises :class:`StreamNotFound` (no item, or a
        tombstone), :class:`StoreError`."""
        response = dynamo.call(
            self._client.get_item,
            TableName=self._table,
            Key=self._key(stream_id),
            ConsistentRead=True,
        )
        item = response.get("Item")
        plain = None if item is None else dynamo.plain(item)
        if plain is None or is_tombstone(plain):
            raise StreamNotFound(stream_id)
        return Stream.from_item(plain)

    # --- plumbing ----------------------------------------------------------------------------

    def _key(self, stream_id: str) -> dict[str, Any]:
        return {PK: {"S": stream_key(stream_id)}}
