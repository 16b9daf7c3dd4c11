"""The lease store: every lease change is one conditional ``UpdateItem`` (DESIGN §4).

Thin adapter over a boto3 DynamoDB *client* (thread-safe; share one per process). The decisions
— expired? whose is it? — come from :mod:`streamlease.rules`; this module only phrases them as
conditions and translates failures into :mod:`streamlease.errors`:

- ``acquire`` → :class:`Lease` or :class:`LeaseConflict`;
- ``renew`` → new expiry, or :class:`StreamStopped` (close normally, then release) or
  :class:`LeaseLost` (stop at once, write nothing more);
- anything the store did not answer → :class:`StoreError` (the write may or may not have landed).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from streamlease import dynamo, rules
from streamlease.errors import LeaseConflict, LeaseLost, StoreError, StreamStopped
from streamlease.model import Lease, LeaseView, Stream, WorkerInfo, is_tombstone, iso_ms
from streamlease.schema import (
    BY_KIND,
    BY_OWNER,
    BY_STATE_EXPIRY,
    PK,
    WORKER_KIND,
    DesiredState,
    StreamAttr,
    WorkerAttr,
    stream_key,
    worker_key,
)

_A = StreamAttr


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch (the clock DynamoDB conditions compare)."""
    return time.time_ns() // 1_000_000


class LeaseStore:
    """Acquire, renew (with checkpoint), release and query stream leases and worker items."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        clock_skew_ms: int = 1000,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        """``client``: a boto3 DynamoDB client; ``clock_ms``: for calls given no ``now_ms``."""
        self._client = client
        self._table = table_name
        self._skew_ms = clock_skew_ms
        self._clock_ms = clock_ms

    # --- leases ------------------------------------------------------------------------------

    def acquire(
        self, stream_id: str, owner: str, lease_ms: int, *, now_ms: int | None = None
    ) -> Lease:
        """Take the lease if the stream is STARTED and free or expired; epoch + 1.

        Returns the new :class:`Lease` (epoch to fence with, ``last_seq`` to resume from).
        Raises :class:`LeaseConflict` (``reason`` is ``missing``, ``stopped`` or ``owned``) or
        :class:`StoreError` when neither the write nor a consistent re-read got an answer.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        cutoff = rules.acquire_cutoff_ms(now, self._skew_ms)
        try:
            item = self._take(stream_id, owner, lease_ms, now, cutoff, previous=None)
            return _lease_from(item, previous_owner=None)
        except dynamo.ConditionFailed as failed:
            old = failed.old
        except StoreError:
            return self._resolve_unknown_acquire(stream_id, owner, now, lease_ms)

        mine = self._owned_by_me(stream_id, owner, old, now, lease_ms)
        if mine is not None:
            return mine
        assert old is not None
        previous = str(old[_A.LEASE_OWNER])
        try:
            item = self._take(stream_id, owner, lease_ms, now, cutoff, previous=old)
            return _lease_from(item, previous_owner=previous)
        except dynamo.ConditionFailed as failed:
            mine = self._owned_by_me(stream_id, owner, failed.old, now, lease_ms)
            if mine is not None:
                return dataclasses.replace(mine, previous_owner=previous)
            raise LeaseConflict(stream_id, "owned") from None
        except StoreError:
            lease = self._resolve_unknown_acquire(stream_id, owner, now, lease_ms)
            return dataclasses.replace(lease, previous_owner=previous)

    def _owned_by_me(
        self, stream_id: str, owner: str, old: dict[str, Any] | None, now_ms: int, lease_ms: int
    ) -> Lease | None:
        """Classify a failed take from the item as it was.

        Ours already (a retried write of this very acquire that landed) → that Lease; held by
        an expired holder, possibly an earlier holding of ``owner`` → None (the caller tries a
        takeover); anything else → :class:`LeaseConflict`.
        """
        if old is None or is_tombstone(old):
            raise LeaseConflict(stream_id, "missing")
        if old.get(_A.DESIRED_STATE) != DesiredState.STARTED:
            raise LeaseConflict(stream_id, "stopped")
        holder = old.get(_A.LEASE_OWNER)
        if _is_this_acquire(old, owner, now_ms, lease_ms):
            return _lease_from(old, previous_owner=None)
        if holder is None:
            # Released between our two reads of the world; the caller may simply retry.
            raise LeaseConflict(stream_id, "owned")
        expires = int(old.get(_A.LEASE_EXPIRES_AT_MS, 0))
        if not rules.is_expired(expires, now_ms, self._skew_ms):
            raise LeaseConflict(stream_id, "owned")
        return None

    def _take(
        self,
        stream_id: str,
        owner: str,
        lease_ms: int,
        now_ms: int,
        cutoff_ms: int,
        previous: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        values: dict[str, Any] = {
            ":me": owner,
            ":exp": rules.new_expiry_ms(now_ms, lease_ms),
            ":now": now_ms,
            ":iso": iso_ms(now_ms),
            ":zero": 0,
            ":one": 1,
            ":started": DesiredState.STARTED.value,
        }
        update = (
            f"SET {_A.LEASE_OWNER} = :me, {_A.LEASE_EXPIRES_AT_MS} = :exp,"
            f" {_A.LEASE_ACQUIRED_AT_MS} = :now, {_A.UPDATED_AT} = :iso,"
            f" {_A.LEASE_EPOCH} = if_not_exists({_A.LEASE_EPOCH}, :zero) + :one"
        )
        condition = f"attribute_exists({PK}) AND {_A.DESIRED_STATE} = :started"
        if previous is None:
            condition += f" AND attribute_not_exists({_A.LEASE_OWNER})"
        else:
            # Take over an expired holder: pin the exact owner and epoch we judged expired.
            update += f", {_A.TAKEOVERS} = if_not_exists({_A.TAKEOVERS}, :zero) + :one"
            condition += (
                f" AND {_A.LEASE_OWNER} = :old AND {_A.LEASE_EPOCH} = :old_epoch"
                f" AND {_A.LEASE_EXPIRES_AT_MS} < :cutoff"
            )
            values[":old"] = previous[_A.LEASE_OWNER]
            values[":old_epoch"] = int(previous.get(_A.LEASE_EPOCH, 0))
            values[":cutoff"] = cutoff_ms
        return self._update(stream_key(stream_id), update, condition, values, returns="ALL_NEW")

    def _resolve_unknown_acquire(
        self, stream_id: str, owner: str, now_ms: int, lease_ms: int
    ) -> Lease:
        """An acquire whose answer was lost may have succeeded: a consistent read decides."""
        item = self._get(stream_key(stream_id), consistent=True)
        if item is not None and _is_this_acquire(item, owner, now_ms, lease_ms):
            return _lease_from(item, previous_owner=None)
        missing = item is None or is_tombstone(item)
        raise LeaseConflict(stream_id, "missing" if missing else "owned")

    def renew(
        self,
        stream_id: str,
        owner: str,
        epoch: int,
        last_seq: int,
        lease_ms: int,
        *,
        now_ms: int | None = None,
    ) -> int:
        """Heartbeat + checkpoint in one write; returns the new expiry (wall ms).

        Idempotent: retry freely within the fencing deadline. Raises :class:`StreamStopped`
        when the lease is still ours but the stream was stopped, :class:`LeaseLost` when it is
        not ours at this epoch any more, :class:`StoreError` when unanswered.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        expires = rules.new_expiry_ms(now, lease_ms)
        try:
            self._update(
                stream_key(stream_id),
                f"SET {_A.LEASE_EXPIRES_AT_MS} = :exp, {_A.LAST_SEQ} = :seq",
                f"{_A.LEASE_OWNER} = :me AND {_A.LEASE_EPOCH} = :epoch"
                f" AND {_A.DESIRED_STATE} = :started",
                {
                    ":exp": expires,
                    ":seq": last_seq,
                    ":me": owner,
                    ":epoch": epoch,
                    ":started": DesiredState.STARTED.value,
                },
            )
        except dynamo.ConditionFailed as failed:
            old = failed.old
            if _held(old, owner, epoch) and _state(old) == DesiredState.STOPPED:
                raise StreamStopped(stream_id, epoch) from None
            raise LeaseLost(stream_id, epoch, _loss_reason(old, owner, epoch)) from None
        return expires

    def release(
        self,
        stream_id: str,
        owner: str,
        epoch: int,
        *,
        last_seq: int | None = None,
        last_error: str | None = None,
        now_ms: int | None = None,
    ) -> bool:
        """Give the lease up: clear the owner, expiry 0, optional final checkpoint and error.

        Returns True if this call released it, False if it was already released at this epoch
        (a retried release) or the stream is gone. Raises :class:`LeaseLost` when another
        holder has taken the stream since (the final checkpoint was *not* written).
        """
        now = self._clock_ms() if now_ms is None else now_ms
        sets = [f"{_A.LEASE_EXPIRES_AT_MS} = :zero", f"{_A.UPDATED_AT} = :iso"]
        values: dict[str, Any] = {":zero": 0, ":iso": iso_ms(now), ":me": owner, ":epoch": epoch}
        if last_seq is not None:
            sets.append(f"{_A.LAST_SEQ} = :seq")
            values[":seq"] = last_seq
        if last_error is not None:
            sets += [f"{_A.LAST_ERROR} = :err", f"{_A.LAST_ERROR_AT} = :iso"]
            values[":err"] = last_error
        try:
            self._update(
                stream_key(stream_id),
                f"SET {', '.join(sets)} REMOVE {_A.LEASE_OWNER}",
                f"{_A.LEASE_OWNER} = :me AND {_A.LEASE_EPOCH} = :epoch",
                values,
            )
        except dynamo.ConditionFailed as failed:
            old = failed.old
            if old is None:
                return False
            if old.get(_A.LEASE_OWNER) is None and int(old.get(_A.LEASE_EPOCH, 0)) == epoch:
                return False
            raise LeaseLost(stream_id, epoch, _loss_reason(old, owner, epoch)) from None
        return True

    def record_error(
        self, stream_id: str, owner: str, epoch: int, message: str, *, now_ms: int | None = None
    ) -> None:
        """Set ``last_error`` (a short, sanitized message) while holding the lease.

        Raises :class:`LeaseLost` if the lease is no longer ours at ``epoch``.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        try:
            self._update(
                stream_key(stream_id),
                f"SET {_A.LAST_ERROR} = :err, {_A.LAST_ERROR_AT} = :iso",
                f"{_A.LEASE_OWNER} = :me AND {_A.LEASE_EPOCH} = :epoch",
                {":err": message[:500], ":iso": iso_ms(now), ":me": owner, ":epoch": epoch},
            )
        except dynamo.ConditionFailed as failed:
            raise LeaseLost(stream_id, epoch, _loss_reason(failed.old, owner, epoch)) from None

    # --- reads -------------------------------------------------------------------------------

    def read(self, stream_id: str, *, consistent: bool = True) -> Stream | None:
        """The stream item, or None if there is none (or only a deleted stream's tombstone)."""
        item = self._get(stream_key(stream_id), consistent=consistent)
        return None if item is None or is_tombstone(item) else Stream.from_item(item)

    def expiring_before(self, bound_ms: int, *, limit: int) -> list[LeaseView]:
        """STARTED streams whose ``lease_expires_at_ms < bound_ms``, soonest first (GSI).

        With ``bound_ms`` = the acquire cutoff these are the orphans; with
        :func:`rules.suspect_bound_ms` they also include leases that missed heartbeats.
        """
        if limit <= 0:
            return []
        query = {
            "IndexName": BY_STATE_EXPIRY.name,
            "KeyConditionExpression": "#s = :started AND #e < :bound",
            "ExpressionAttributeNames": {"#s": _A.DESIRED_STATE, "#e": _A.LEASE_EXPIRES_AT_MS},
            "ExpressionAttributeValues": dynamo.serialize(
                {":started": DesiredState.STARTED.value, ":bound": bound_ms}
            ),
        }
        return [LeaseView.from_item(item) for item in self._query(query, limit)]

    def owned_by(self, worker_id: str) -> list[LeaseView]:
        """Leases whose stored owner is ``worker_id`` (GSI, eventually consistent)."""
        query = {
            "IndexName": BY_OWNER.name,
            "KeyConditionExpression": "#o = :w",
            "ExpressionAttributeNames": {"#o": _A.LEASE_OWNER},
            "ExpressionAttributeValues": dynamo.serialize({":w": worker_id}),
        }
        return [LeaseView.from_item(item) for item in self._query(query, None)]

    # --- worker items ------------------------------------------------------------------------

    def put_worker(self, info: WorkerInfo) -> None:
        """Write (heartbeat) a worker item. Worker ids are unique per incarnation: no condition."""
        self._call(
            "put_item",
            Item=dynamo.serialize(info.to_item()),
        )

    def list_workers(self, *, now_ms: int | None = None) -> list[WorkerInfo]:
        """Workers whose item has not expired at ``now_ms`` (GSI on worker items only)."""
        now = self._clock_ms() if now_ms is None else now_ms
        query = {
            "IndexName": BY_KIND.name,
            "KeyConditionExpression": "#k = :kind AND #e > :now",
            "ExpressionAttributeNames": {"#k": WorkerAttr.KIND, "#e": WorkerAttr.EXPIRES_AT_MS},
            "ExpressionAttributeValues": dynamo.serialize({":kind": WORKER_KIND, ":now": now}),
        }
        return [WorkerInfo.from_item(item) for item in self._query(query, None)]

    def remove_worker(self, worker_id: str) -> None:
        """Delete a worker item (on clean exit)."""
        self._call("delete_item", Key=self._key(worker_key(worker_id)))

    # --- plumbing ----------------------------------------------------------------------------

    def _key(self, pk: str) -> dict[str, Any]:
        return {PK: {"S": pk}}

    def _get(self, pk: str, *, consistent: bool) -> dict[str, Any] | None:
        response = self._call("get_item", Key=self._key(pk), ConsistentRead=consistent)
        item = response.get("Item")
        return None if item is None else dynamo.plain(item)

    def _query(self, query: dict[str, Any], limit: int | None) -> Iterator[dict[str, Any]]:
        return dynamo.items(self._client, "query", limit=limit, TableName=self._table, **query)

    def _update(
        self,
        pk: str,
        update: str,
        condition: str,
        values: Mapping[str, Any],
        *,
        returns: str = "NONE",
    ) -> dict[str, Any]:
        """One conditional UpdateItem. Raises :class:`dynamo.ConditionFailed` carrying the old
        item, :class:`StoreError` when unanswered."""
        response = self._call(
            "update_item",
            Key=self._key(pk),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues=dynamo.serialize(values),
            ReturnValues=returns,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return dynamo.plain(response.get("Attributes", {}))

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        return dynamo.call(self._client, operation, TableName=self._table, **kwargs)


def _state(old: Mapping[str, Any] | None) -> str | None:
    return None if old is None else old.get(_A.DESIRED_STATE)


def _held(old: Mapping[str, Any] | None, owner: str, epoch: int) -> bool:
    return (
        old is not None
        and old.get(_A.LEASE_OWNER) == owner
        and int(old.get(_A.LEASE_EPOCH, -1)) == epoch
    )


def _loss_reason(old: Mapping[str, Any] | None, owner: str, epoch: int) -> str:
    if old is None:
        return "stream deleted"
    holder = old.get(_A.LEASE_OWNER)
    if int(old.get(_A.LEASE_EPOCH, -1)) != epoch:
        return "epoch moved on"
    if holder is None:
        return "released"
    if holder != owner:
        return "owned by another worker"
    return "condition failed"


def _is_this_acquire(item: Mapping[str, Any], owner: str, now_ms: int, lease_ms: int) -> bool:
    """True when ``item`` holds exactly what an acquire by ``owner`` at ``now_ms`` wrote.

    Only then is a lease "ours already". An older holding by the same owner is not: its
    expiry may be past (anyone may take it over) while the caller would fence from now.
    """
    return (
        item.get(_A.LEASE_OWNER) == owner
        and int(item.get(_A.LEASE_ACQUIRED_AT_MS, -1)) == now_ms
        and int(item.get(_A.LEASE_EXPIRES_AT_MS, -1)) == rules.new_expiry_ms(now_ms, lease_ms)
    )


def _lease_from(item: Mapping[str, Any], previous_owner: str | None) -> Lease:
    stream = Stream.from_item(item)
    assert stream.owner is not None
    return Lease(
        stream_id=stream.stream_id,
        owner=stream.owner,
        epoch=stream.epoch,
        expires_at_ms=stream.expires_at_ms,
        last_seq=stream.last_seq,
        ws_url=stream.ws_url,
        generation=stream.generation,
        previous_owner=previous_owner,
    )
