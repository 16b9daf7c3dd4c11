"""The lease store: every change of a stream's lease is one conditional ``UpdateItem``
(architecture §4).

Thin adapter over a boto3 DynamoDB *client* (thread-safe; share one per process). The decisions
— expired? whose is it? where to resume? — come from :mod:`streamlease.rules`; this module only
phrases them as conditions and translates failures into :mod:`streamlease.errors`:

- ``acquire`` → :class:`Lease` or :class:`LeaseConflict`. With a ``slot`` the lease is attached
  to the owner's *session* (architecture §4a) and has no expiry of its own; without, it is a
  per-stream lease (§4b) that its holder renews;
- ``renew`` (per-stream leases) → new expiry, or :class:`StreamStopped` (close normally, then
  release) or :class:`LeaseLost` (stop at once, write nothing more);
- ``release`` → the stream as it is now; a release whose answer was lost is recognised on retry;
- ``take_from`` / ``release_for`` → a dead session's stream taken over or freed, resuming at the
  merged checkpoint (:func:`streamlease.rules.resume_seq`);
- anything the store did not answer → :class:`StoreError` (the write may or may not have landed).

Attribute names only ever reach DynamoDB through ``#placeholders`` (:data:`_NAMES`), so no
attribute can collide with a reserved word, and conditions are built from named clauses.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo, expiry_index, rules
from streamlease.errors import LeaseConflict, LeaseLost, StoreError, StreamStopped
from streamlease.model import Lease, LeaseView, Stream, StreamProgress, is_tombstone, iso_ms
from streamlease.schema import (
    BY_OWNER,
    BY_SHARD_EXPIRY,
    PK,
    SESSION_HELD_MS,
    ConnectionState,
    DesiredState,
    Liveness,
    StreamAttr,
    expiry_shard,
    shard_key,
    stream_key,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.literals import ReturnValueType
    from types_boto3_dynamodb.type_defs import QueryInputTypeDef, ScanInputTypeDef

_A = StreamAttr
_NAMES: Final = {
    "#pk": PK,
    "#state": _A.DESIRED_STATE,
    "#owner": _A.LEASE_OWNER,
    "#exp": _A.LEASE_EXPIRES_AT_MS,
    "#epoch": _A.LEASE_EPOCH,
    "#slot": _A.LEASE_SLOT,
    "#rel": _A.LEASE_RELEASED_EPOCH,
    "#seq": _A.LAST_SEQ,
    "#acq": _A.LEASE_ACQUIRED_AT_MS,
    "#uat": _A.UPDATED_AT,
    "#gen": _A.GENERATION,
    "#tko": _A.TAKEOVERS,
    "#err": _A.LAST_ERROR,
    "#errat": _A.LAST_ERROR_AT,
    "#conn": _A.CONNECTION_STATE,
    "#connat": _A.CONNECTION_SINCE,
    "#uby": _A.UPDATED_BY,
    "#frx": _A.FRAMES_RECEIVED,
    "#fdl": _A.FRAMES_DELIVERED,
    "#fml": _A.FRAMES_MALFORMED,
    "#gaps": _A.SEQ_GAPS,
    "#fctl": _A.FRAMES_CONTROL,
    "#lmsg": _A.LAST_MESSAGE_AT_MS,
    "#pat": _A.PROGRESS_AT_MS,
    "#pseq": _A.PROGRESS_SEQ,
    "#shard": _A.EXPIRY_SHARD,
}
"""Every attribute this module names, by placeholder."""
_PROGRESS: Final = (
    ("#frx", "received"),
    ("#fdl", "delivered"),
    ("#fml", "malformed"),
    ("#gaps", "gaps"),
    ("#fctl", "control"),
)
"""Progress counters: placeholder and :class:`StreamProgress` field."""
_NEW_HOLDING_REMOVES: Final = (*(name for name, _ in _PROGRESS), "#lmsg", "#pat", "#pseq")
"""What an acquisition removes: the previous holding's progress."""

# Named condition clauses (Powertools' idempotency store does the same): each says one thing.
_EXISTS: Final = "attribute_exists(#pk)"
_STARTED: Final = "#state = :started"
_FREE: Final = "attribute_not_exists(#owner)"
_HELD_BY_ME: Final = "#owner = :me AND #epoch = :epoch"
_HELD_BY_OLD: Final = "#owner = :old AND #epoch = :old_epoch"
_EXPIRED_BY_CUTOFF: Final = "#exp < :cutoff"
_EXPIRY_GROWS: Final = "#exp < :exp"
_SEQ_NOT_BACK: Final = "(attribute_not_exists(#seq) OR #seq <= :seq)"


@dataclasses.dataclass(frozen=True)
class OwnedStreams:
    """What :meth:`LeaseStore.stopped_of` found: the owned streams asked to stop, those
    changed above a generation (STARTED), and the number owned in all."""

    stopped: tuple[LeaseView, ...]
    count: int
    changed: tuple[LeaseView, ...] = ()


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch (the clock DynamoDB conditions compare)."""
    return time.time_ns() // 1_000_000


def _all(*clauses: str) -> str:
    return " AND ".join(clauses)


class LeaseStore:
    """Acquire, renew (with checkpoint), release, take over and query stream leases."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        clock_skew_ms: int = 1000,
        clock_ms: Callable[[], int] = wall_ms,
        liveness: Liveness = Liveness.SESSION,
    ) -> None:
        """``client``: a boto3 DynamoDB client; ``clock_ms``: for calls given no ``now_ms``;
        ``liveness``: the fleet's mode (it decides a free stream's orphan-index shard)."""
        self._client = client
        self._table = table_name
        self._skew_ms = clock_skew_ms
        self._clock_ms = clock_ms
        self._liveness = liveness

    # --- acquire -----------------------------------------------------------------------------

    def acquire(
        self,
        stream_id: str,
        owner: str,
        lease_ms: int,
        *,
        now_ms: int | None = None,
        slot: int | None = None,
    ) -> Lease:
        """Take the lease if the stream is STARTED and free (or its per-stream lease expired);
        epoch + 1.

        ``slot``: attach the lease to session ``owner`` in that checkpoint slot (no expiry of
        its own); None: a per-stream lease of ``lease_ms``. Returns the new :class:`Lease`
        (epoch to fence with, ``last_seq`` to resume from). Raises :class:`LeaseConflict`
        (``reason`` is ``missing``, ``stopped`` or ``owned``) or :class:`StoreError` when
        neither the write nor a consistent re-read got an answer.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        take = _Take(
            stream_id, owner, lease_ms, now, slot, rules.acquire_cutoff_ms(now, self._skew_ms)
        )
        try:
            return _lease_from(self._take(take, previous=None), previous_owner=None)
        except dynamo.ConditionFailed as failed:
            old = failed.old
        except StoreError:
            return self._resolve_unknown_acquire(take, previous=None)

        mine = self._classify_failed_take(take, old)
        if mine is not None:
            return mine
        assert old is not None
        previous = str(old[_A.LEASE_OWNER])
        try:
            item = self._take(take, previous=old)
            return _lease_from(item, previous_owner=previous)
        except dynamo.ConditionFailed as failed:
            mine = self._classify_failed_take(take, failed.old)
            if mine is not None:
                return dataclasses.replace(mine, previous_owner=previous)
            raise LeaseConflict(stream_id, "owned") from None
        except StoreError:
            return self._resolve_unknown_acquire(take, previous=old)

    def _classify_failed_take(self, take: _Take, old: dict[str, Any] | None) -> Lease | None:
        """Classify a failed take from the item as it was.

        Ours already (a retried write of this very acquire that landed) → that Lease; held by
        a lapsed per-stream lease, possibly an earlier holding of ``owner`` → None (the caller
        tries a takeover); anything else → :class:`LeaseConflict`.
        """
        stream_id = take.stream_id
        if old is None or is_tombstone(old):
            raise LeaseConflict(stream_id, "missing")
        if old.get(_A.DESIRED_STATE) != DesiredState.STARTED:
            self._align(old)  # found through a stale orphan entry: drop it
            raise LeaseConflict(stream_id, "stopped")
        if _is_this_acquire(old, take):
            return _lease_from(old, previous_owner=None)
        if old.get(_A.LEASE_OWNER) is None:
            # Released between our two reads of the world; the caller may simply retry.
            raise LeaseConflict(stream_id, "owned")
        expires = int(old.get(_A.LEASE_EXPIRES_AT_MS, 0))
        if not rules.is_expired(expires, take.now_ms, self._skew_ms):
            raise LeaseConflict(stream_id, "owned")
        return None

    def _take(self, take: _Take, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        values: dict[str, Any] = {
            ":me": take.owner,
            ":exp": take.expires_at_ms,
            ":now": take.now_ms,
            ":iso": iso_ms(take.now_ms),
            ":zero": 0,
            ":one": 1,
            ":started": DesiredState.STARTED.value,
        }
        sets = [
            "#owner = :me",
            "#exp = :exp",
            "#acq = :now",
            "#uat = :iso",
            "#uby = :me",
            "#conn = :connecting",
            "#connat = :iso",
            "#epoch = if_not_exists(#epoch, :zero) + :one",
        ]
        values[":connecting"] = ConnectionState.CONNECTING.value
        removes = list(_NEW_HOLDING_REMOVES)
        if take.slot is None:  # a per-stream lease: in the orphan index, by its expiry
            removes.append("#slot")
            sets.append("#shard = :shard")
            values[":shard"] = expiry_shard(take.stream_id, self._liveness)
        else:  # attached to a session: out of the orphan index
            sets.append("#slot = :slot")
            values[":slot"] = take.slot
            removes.append("#shard")
        condition = [_EXISTS, _STARTED]
        if previous is None:
            condition.append(_FREE)
        else:
            # Take over a lapsed per-stream lease: pin the exact owner and epoch judged expired.
            sets.append("#tko = if_not_exists(#tko, :zero) + :one")
            condition += [_HELD_BY_OLD, _EXPIRED_BY_CUTOFF]
            values[":old"] = previous[_A.LEASE_OWNER]
            values[":old_epoch"] = int(previous.get(_A.LEASE_EPOCH, 0))
            values[":cutoff"] = take.cutoff_ms
        update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)}"
        return self._update(stream_key(take.stream_id), update, _all(*condition), values, "ALL_NEW")

    def _resolve_unknown_acquire(self, take: _Take, previous: Mapping[str, Any] | None) -> Lease:
        """An acquire whose answer was lost may have succeeded: a consistent read decides.

        This very write is recognised by what only it wrote (owner, acquire time, expiry and
        slot). A stream still free (the write never landed) is tried once more rather than
        reported as owned: a start command for it must not be dropped. A conflict raised here
        has ``write_may_land`` set.
        """
        item = self._get(stream_key(take.stream_id), consistent=True)
        previous_owner = None if previous is None else str(previous[_A.LEASE_OWNER])
        if item is not None and _is_this_acquire(item, take):
            return _lease_from(item, previous_owner=previous_owner)
        # The lost write may still land after this read: every conflict says so.
        if item is None or is_tombstone(item):
            raise LeaseConflict(take.stream_id, "missing", write_may_land=True)
        if item.get(_A.DESIRED_STATE) != DesiredState.STARTED:
            raise LeaseConflict(take.stream_id, "stopped", write_may_land=True)
        if item.get(_A.LEASE_OWNER) is None and previous is None:
            try:
                return _lease_from(self._take(take, previous=None), previous_owner=None)
            except dynamo.ConditionFailed as failed:
                if failed.old is not None and _is_this_acquire(failed.old, take):
                    return _lease_from(failed.old, previous_owner=None)
        raise LeaseConflict(take.stream_id, "owned", write_may_land=True)

    # --- per-stream renewal --------------------------------------------------------------------

    def renew(
        self,
        stream_id: str,
        owner: str,
        epoch: int,
        last_seq: int,
        lease_ms: int,
        *,
        now_ms: int | None = None,
        previous_expires_ms: int = 0,
    ) -> int:
        """Heartbeat + checkpoint of a per-stream lease in one write; returns the new expiry.

        The expiry written is send time + lease, and above ``previous_expires_ms`` (the highest
        this holder sent before); the condition lets neither the expiry nor ``last_seq`` go
        back, so a renewal that DynamoDB applies after a newer one changes nothing. Raises
        :class:`StreamStopped` when the lease is still ours but the stream was stopped,
        :class:`LeaseLost` when it is not ours at this epoch any more, :class:`StoreError` when
        unanswered (or overtaken by a newer renewal of ours: retry with a fresh expiry).
        """
        now = self._clock_ms() if now_ms is None else now_ms
        expires = rules.next_session_expiry_ms(now, lease_ms, previous_expires_ms)
        try:
            self._update(
                stream_key(stream_id),
                "SET #exp = :exp, #seq = :seq",
                _all(_HELD_BY_ME, _STARTED, _EXPIRY_GROWS, _SEQ_NOT_BACK),
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
            if _held(old, owner, epoch):
                if _state(old) == DesiredState.STOPPED:
                    raise StreamStopped(stream_id, epoch) from None
                if _state(old) == DesiredState.STARTED:
                    raise StoreError("renewal overtaken by a newer one") from None
            raise LeaseLost(stream_id, epoch, _loss_reason(old, owner, epoch)) from None
        return expires

    # --- release -------------------------------------------------------------------------------

    def release(
        self,
        stream_id: str,
        owner: str,
        epoch: int,
        *,
        last_seq: int | None = None,
        last_error: str | None = None,
        stop: bool = False,
        progress: StreamProgress | None = None,
        now_ms: int | None = None,
    ) -> Stream | None:
        """Give the lease up: clear owner, slot and expiry; optional final checkpoint, error and
        progress (kept on the item for an operator until the next acquisition).

        ``stop``: also set the stream STOPPED (generation + 1), for a stream its upstream ended.
        Returns the stream as it is after the release — its ``desired_state`` tells the caller
        whether a handoff is wanted — or None when the stream is gone. A retried release whose
        first attempt landed returns the stream as it is now too (``lease_released_epoch`` names
        this epoch, whether the stream is still free or another worker has acquired it since),
        so the caller knows it handed the stream over. Raises :class:`LeaseLost` when the lease
        was taken from this holding (the final checkpoint was *not* written).
        """
        now = self._clock_ms() if now_ms is None else now_ms
        sets = ["#exp = :zero", "#uat = :iso", "#uby = :me", "#rel = :epoch"]
        removes = ["#owner", "#slot"]
        values: dict[str, Any] = {":zero": 0, ":iso": iso_ms(now), ":me": owner, ":epoch": epoch}
        if not stop:  # free and (most likely) STARTED: an orphan-index entry, aligned below
            sets.append("#shard = :shard")
            values[":shard"] = expiry_shard(stream_id, self._liveness)
        if last_seq is not None:
            sets.append("#seq = :seq")
            values[":seq"] = last_seq
        if last_error is not None:
            sets += ["#err = :err", "#errat = :iso"]
            values[":err"] = last_error[:500]
        if progress is not None:
            sets += _progress_sets(progress, values)
        if stop:
            sets += [
                "#state = :stopped",
                "#gen = #gen + :one",
                "#conn = :ended",
                "#connat = :iso",
            ]
            values[":stopped"] = DesiredState.STOPPED.value
            values[":ended"] = ConnectionState.ENDED.value
            values[":one"] = 1
            removes.append("#shard")
        else:
            removes += ["#conn", "#connat"]
        try:
            item = self._update(
                stream_key(stream_id),
                f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                _HELD_BY_ME,
                values,
                "ALL_NEW",
            )
        except dynamo.ConditionFailed as failed:
            old = failed.old
            if old is None or is_tombstone(old):
                return None
            if int(old.get(_A.LEASE_RELEASED_EPOCH, -1)) == epoch:  # our first attempt landed
                return Stream.from_item(old)
            raise LeaseLost(stream_id, epoch, _loss_reason(old, owner, epoch)) from None
        self._align(item)
        return Stream.from_item(item)

    def record_connection(
        self,
        stream_id: str,
        owner: str,
        epoch: int,
        state: ConnectionState,
        error: str | None = None,
        *,
        progress: StreamProgress | None = None,
        now_ms: int | None = None,
    ) -> None:
        """Record a change of the connection state (and, with it, ``last_error``: a short,
        sanitized message, and the holding's ``progress``) while holding the lease.

        Raises :class:`LeaseLost` if the lease is no longer ours at ``epoch``.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        values: dict[str, Any] = {":conn": state.value, ":iso": iso_ms(now)}
        sets = ["#conn = :conn", "#connat = :iso"]
        if error is not None:
            sets += ["#err = :err", "#errat = :iso"]
            values[":err"] = error[:500]
        if progress is not None:
            sets += _progress_sets(progress, values)
        self._record_holding(stream_id, owner, epoch, sets, values)

    def record_progress(
        self, stream_id: str, owner: str, epoch: int, progress: StreamProgress
    ) -> None:
        """Record the holding's progress counters, as of ``progress.at_ms`` (no index attribute
        changes: one write unit for an item under 1 KB). Raises :class:`LeaseLost` if the lease
        is no longer ours."""
        values: dict[str, Any] = {}
        sets = _progress_sets(progress, values)
        self._record_holding(stream_id, owner, epoch, sets, values)

    def _record_holding(
        self, stream_id: str, owner: str, epoch: int, sets: list[str], values: dict[str, Any]
    ) -> None:
        values.update({":me": owner, ":epoch": epoch})
        try:
            self._update(stream_key(stream_id), "SET " + ", ".join(sets), _HELD_BY_ME, values)
        except dynamo.ConditionFailed as failed:
            raise LeaseLost(stream_id, epoch, _loss_reason(failed.old, owner, epoch)) from None

    # --- a dead session's streams (architecture §4a, takeover and sweep) -----------------------

    def take_from(
        self,
        stream_id: str,
        dead_owner: str,
        dead_epoch: int,
        resume_seq: int | None,
        new_owner: str,
        slot: int,
        *,
        now_ms: int | None = None,
    ) -> Lease:
        """Take a STARTED stream of a dead session: epoch + 1, ``takeovers`` + 1, attached to
        ``new_owner``'s session in ``slot``, resuming at ``resume_seq`` (None: the item's own
        ``last_seq``; a smaller one never moves it back).

        Raises :class:`LeaseConflict` (``owned``: not the dead session's at that epoch any more;
        ``stopped``; ``missing``) or :class:`StoreError`.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        sets = [
            "#owner = :me",
            "#slot = :slot",
            "#exp = :held",
            "#acq = :now",
            "#uat = :iso",
            "#uby = :me",
            "#conn = :connecting",
            "#connat = :iso",
            "#epoch = #epoch + :one",
            "#tko = if_not_exists(#tko, :zero) + :one",
        ]
        values: dict[str, Any] = {
            ":connecting": ConnectionState.CONNECTING.value,
            ":me": new_owner,
            ":slot": slot,
            ":held": SESSION_HELD_MS,
            ":now": now,
            ":iso": iso_ms(now),
            ":one": 1,
            ":zero": 0,
            ":old": dead_owner,
            ":old_epoch": dead_epoch,
            ":started": DesiredState.STARTED.value,
        }
        condition = [_HELD_BY_OLD, _STARTED]
        if resume_seq is not None:
            sets.append("#seq = :seq")
            values[":seq"] = resume_seq
            condition.append(_SEQ_NOT_BACK)
        removes = ", ".join((*_NEW_HOLDING_REMOVES, "#shard"))  # attached to a session
        update = f"SET {', '.join(sets)} REMOVE {removes}"
        try:
            item = self._update(stream_key(stream_id), update, _all(*condition), values, "ALL_NEW")
        except dynamo.ConditionFailed as failed:
            old = failed.old
            if old is None or is_tombstone(old):
                raise LeaseConflict(stream_id, "missing") from None
            if _held(old, dead_owner, dead_epoch) and _state(old) == DesiredState.STARTED:
                # Its own last_seq is further than the merged one: keep it.
                return self.take_from(
                    stream_id, dead_owner, dead_epoch, None, new_owner, slot, now_ms=now
                )
            reason = "stopped" if _held(old, dead_owner, dead_epoch) else "owned"
            raise LeaseConflict(stream_id, reason) from None
        return _lease_from(item, previous_owner=dead_owner)

    def release_for(
        self,
        stream_id: str,
        dead_owner: str,
        dead_epoch: int,
        resume_seq: int | None,
        *,
        last_error: str | None = None,
        now_ms: int | None = None,
    ) -> Stream | None:
        """Free a dead holder's stream (``takeovers`` + 1), with ``last_seq`` moved up to
        ``resume_seq`` if given. Returns the stream as it is now, or None when it was no longer
        the dead holder's at that epoch (released, taken or deleted meanwhile: nothing to do).
        """
        now = self._clock_ms() if now_ms is None else now_ms
        sets = [
            "#exp = :zero",
            "#uat = :iso",
            "#tko = if_not_exists(#tko, :zero) + :one",
            "#shard = :shard",
        ]
        values: dict[str, Any] = {
            ":zero": 0,
            ":one": 1,
            ":iso": iso_ms(now),
            ":old": dead_owner,
            ":old_epoch": dead_epoch,
            ":shard": expiry_shard(stream_id, self._liveness),
        }
        if last_error is not None:
            sets += ["#err = :err", "#errat = :iso"]
            values[":err"] = last_error[:500]
        condition = [_HELD_BY_OLD]
        if resume_seq is not None:
            sets.append("#seq = :seq")
            values[":seq"] = resume_seq
            condition.append(_SEQ_NOT_BACK)
        try:
            item = self._update(
                stream_key(stream_id),
                f"SET {', '.join(sets)} REMOVE #owner, #slot, #conn, #connat",
                _all(*condition),
                values,
                "ALL_NEW",
            )
        except dynamo.ConditionFailed as failed:
            old = failed.old
            if resume_seq is not None and _held(old, dead_owner, dead_epoch):
                return self.release_for(
                    stream_id, dead_owner, dead_epoch, None, last_error=last_error, now_ms=now
                )
            return None
        self._align(item)
        return Stream.from_item(item)

    # --- reads -------------------------------------------------------------------------------

    def read(self, stream_id: str, *, consistent: bool = True) -> Stream | None:
        """The stream item, or None if there is none (or only a deleted stream's tombstone)."""
        item = self._get(stream_key(stream_id), consistent=consistent)
        return None if item is None or is_tombstone(item) else Stream.from_item(item)

    def expiring_before(self, bound_ms: int, *, limit: int) -> list[LeaseView]:
        """Per-stream leases: STARTED streams whose ``lease_expires_at_ms < bound_ms``,
        soonest first (the one shard of ``by-shard-expiry`` such a fleet writes).

        With ``bound_ms`` = the acquire cutoff these are the orphans (free, or a lease that
        lapsed); with :func:`rules.suspect_bound_ms` they also include leases that missed
        heartbeats.
        """
        if limit <= 0:
            return []
        query: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_SHARD_EXPIRY.name,
            "KeyConditionExpression": "#shard = :shard AND #exp < :bound",
            "ExpressionAttributeNames": _names("#shard", "#exp"),
            "ExpressionAttributeValues": dynamo.serialize(
                {":shard": shard_key(0), ":bound": bound_ms}  # per-stream: one shard
            ),
        }
        return [LeaseView.from_item(item) for item in self._query(query, limit)]

    def held_through_sessions(
        self, *, limit: int, start: Mapping[str, Any] | None = None
    ) -> tuple[list[LeaseView], Mapping[str, Any] | None]:
        """One page of the STARTED streams attached to a session (those with a checkpoint
        slot), from a Scan of ``by-holder`` reading at most ``limit`` entries (eventually
        consistent: owner and epoch), from ``start``; and where the next page starts (None:
        that was the last one). A Scan returns a holder's entries together, so a page names a
        few owners; each page reads the next key range, so no partition is read twice in a
        walk. The cursor is opaque: pass it back as it is. The views carry the stream, owner
        and epoch only: a page is up to ``limit`` of the fleet's held streams, read every
        round, and each attribute more is parsed a thousand times only to be dropped (a
        worker's resident set keeps the high-water mark)."""
        projection = "#pk, #owner, #epoch"
        scan: ScanInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_OWNER.name,
            "FilterExpression": "attribute_exists(#slot) AND #state = :started",
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": _names("#slot", "#state", projection),
            "ExpressionAttributeValues": dynamo.serialize({":started": DesiredState.STARTED.value}),
            "Limit": limit,
        }
        if start is not None:
            scan["ExclusiveStartKey"] = dict(start)
        page = dynamo.call(self._client.scan, **scan)
        views = [LeaseView.from_item(dynamo.plain(item)) for item in page.get("Items", [])]
        return views, page.get("LastEvaluatedKey") or None

    def orphans(
        self, cutoff_ms: int, *, limit: int, segment: int = 0, segments: int = 1
    ) -> list[LeaseView]:
        """Sessions: STARTED streams nobody holds (``lease_expires_at_ms < cutoff_ms``: free,
        or a per-stream lease that lapsed), from one ``segment`` of ``segments`` of a Scan of
        ``by-shard-expiry`` (:func:`rules.scan_segments`): one request reads a small fleet's
        every orphan; a large fleet's workers each read a part. At most ``limit``.

        Per-stream leases read it whole now and then, for the free streams a session fleet left
        in the shards such a fleet never queries (:mod:`worker.ownership.reconciler`). The Scan
        reads every entry (eventually consistent: half a read unit per 4 KB): with per-stream leases
        every STARTED stream has one, about 150 bytes, so some 0.02 read units per stream."""
        if limit <= 0:
            return []
        scan: ScanInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_SHARD_EXPIRY.name,
            "FilterExpression": "#exp < :cutoff",
            "ExpressionAttributeNames": _names("#exp"),
            "ExpressionAttributeValues": dynamo.serialize({":cutoff": cutoff_ms}),
        }
        if segments > 1:
            scan["Segment"], scan["TotalSegments"] = segment, segments
        return [
            LeaseView.from_item(item) for item in dynamo.items(self._client.scan, scan, limit=limit)
        ]

    def owned_by(self, worker_id: str) -> list[LeaseView]:
        """Leases whose stored owner is ``worker_id``, with their epoch, slot, desired state and
        generation (GSI, eventually consistent: a change may show a moment late)."""
        query: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_OWNER.name,
            "KeyConditionExpression": "#owner = :w",
            "ExpressionAttributeNames": _names("#owner"),
            "ExpressionAttributeValues": dynamo.serialize({":w": worker_id}),
        }
        return [LeaseView.from_item(item) for item in self._query(query, None)]

    def stopped_of(self, worker_id: str, above_generation: int | None = None) -> OwnedStreams:
        """The streams ``worker_id`` owns that are asked to stop — and, with
        ``above_generation``, the STARTED ones whose generation is above it (changed in place,
        or stopped and started again) — and how many it owns in all (GSI, eventually
        consistent). One query of the holder index whose filter leaves only those in the answer:
        the read costs what :meth:`owned_by` costs, but a worker holding thousands of streams
        parses a handful of items, not thousands. A holder passes the lowest generation it
        holds: a stream changed since its acquire is above it, whatever the others'. That
        lets through every stream held above the lowest generation (one restarted, say) every
        time, so the views carry what a holder compares only: stream, epoch, desired state and
        generation."""
        values: dict[str, Any] = {":w": worker_id, ":stopped": DesiredState.STOPPED.value}
        condition = "#state = :stopped"
        if above_generation is not None:
            condition += " OR #gen > :gen"
            values[":gen"] = above_generation
        projection = "#pk, #epoch, #state, #gen"
        request: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": BY_OWNER.name,
            "KeyConditionExpression": "#owner = :w",
            "FilterExpression": condition,
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": _names("#owner", "#state", condition, projection),
            "ExpressionAttributeValues": dynamo.serialize(values),
        }
        found: list[LeaseView] = []
        owned = 0
        while True:
            page = dynamo.call(self._client.query, **request)
            owned += page.get("ScannedCount", 0)
            found += (LeaseView.from_item(dynamo.plain(i)) for i in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                stopped = tuple(v for v in found if v.desired_state is DesiredState.STOPPED)
                changed = tuple(v for v in found if v.desired_state is DesiredState.STARTED)
                return OwnedStreams(stopped, owned, changed)
            request["ExclusiveStartKey"] = start

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


def _progress_sets(progress: StreamProgress, values: dict[str, Any]) -> list[str]:
    """``SET`` clauses writing ``progress`` (and when it was taken), their values added to
    ``values``."""
    sets = []
    for name, field in _PROGRESS:
        sets.append(f"{name} = :{name[1:]}")
        values[f":{name[1:]}"] = getattr(progress, field)
    if progress.last_message_at_ms is not None:
        sets.append("#lmsg = :lmsg")
        values[":lmsg"] = progress.last_message_at_ms
    if progress.seq is not None:
        sets.append("#pseq = :pseq")
        values[":pseq"] = progress.seq
    sets.append("#pat = :pat")
    values[":pat"] = progress.at_ms
    return sets


def _names(*expressions: str) -> dict[str, str]:
    return dynamo.placeholders(_NAMES, *expressions)


@dataclasses.dataclass(frozen=True)
class _Take:
    """One acquire attempt: what it writes, and what recognises it on a re-read."""

    stream_id: str
    owner: str
    lease_ms: int
    now_ms: int
    slot: int | None
    cutoff_ms: int

    @property
    def expires_at_ms(self) -> int:
        if self.slot is not None:
            return SESSION_HELD_MS
        return rules.new_expiry_ms(self.now_ms, self.lease_ms)


def _state(old: Mapping[str, Any] | None) -> str | None:
    return None if old is None else old.get(_A.DESIRED_STATE)


def _held(old: Mapping[str, Any] | None, owner: str, epoch: int) -> bool:
    return (
        old is not None
        and old.get(_A.LEASE_OWNER) == owner
        and int(old.get(_A.LEASE_EPOCH, -1)) == epoch
    )


def _loss_reason(old: Mapping[str, Any] | None, owner: str, epoch: int) -> str:
    if old is None or is_tombstone(old):
        return "stream deleted"
    holder = old.get(_A.LEASE_OWNER)
    if int(old.get(_A.LEASE_EPOCH, -1)) != epoch:
        return "epoch moved on"
    if holder is None:
        return "released"
    if holder != owner:
        return "owned by another worker"
    return "condition failed"


def _is_this_acquire(item: Mapping[str, Any], take: _Take) -> bool:
    """True when ``item`` holds exactly what ``take`` wrote.

    Only then is a lease "ours already". An older holding by the same owner is not: its
    expiry may be past (anyone may take it over) while the caller would fence from now.
    """
    slot = item.get(_A.LEASE_SLOT)
    return (
        item.get(_A.LEASE_OWNER) == take.owner
        and int(item.get(_A.LEASE_ACQUIRED_AT_MS, -1)) == take.now_ms
        and int(item.get(_A.LEASE_EXPIRES_AT_MS, -1)) == take.expires_at_ms
        and (None if slot is None else int(slot)) == take.slot
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
        slot=stream.slot,
        profile=stream.profile,
    )
