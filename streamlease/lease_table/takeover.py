"""A dead session's streams: taken over or freed, resuming at the merged checkpoint
(architecture §4a, takeover and sweep)."""

from __future__ import annotations

from typing import Any

from streamlease import dynamo
from streamlease.errors import LeaseConflict
from streamlease.indexes import expiry_shard
from streamlease.lease_table.layout import (
    _HELD_BY_OLD,
    _NEW_HOLDING_REMOVES,
    _SEQ_NOT_BACK,
    _STARTED,
    _all,
    _held,
    _lease_from,
    _state,
)
from streamlease.lease_table.table import LeaseTable
from streamlease.model import Lease, Stream, is_tombstone, iso_ms
from streamlease.schema import SESSION_HELD_MS, ConnectionState, DesiredState, stream_key


class DeadSessionLeases(LeaseTable):
    """:meth:`take_from` and :meth:`release_for` of :class:`~streamlease.lease_store.LeaseStore`."""

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
