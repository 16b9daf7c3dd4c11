"""Acquire: a free stream (or one whose per-stream lease lapsed) taken in one conditional write;
a write whose answer was lost recognised by a consistent re-read (architecture §4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from streamlease import dynamo, rules
from streamlease.errors import LeaseConflict, StoreError
from streamlease.indexes import expiry_shard
from streamlease.lease_table.layout import (
    _A,
    _EXISTS,
    _EXPIRED_BY_CUTOFF,
    _FREE,
    _HELD_BY_OLD,
    _NEW_HOLDING_REMOVES,
    _STARTED,
    _all,
    _lease_from,
)
from streamlease.lease_table.table import LeaseTable
from streamlease.model import Lease, is_tombstone, iso_ms
from streamlease.schema import SESSION_HELD_MS, ConnectionState, DesiredState, stream_key


class LeaseAcquire(LeaseTable):
    """:meth:`acquire` of :class:`~streamlease.lease_store.LeaseStore`."""

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
