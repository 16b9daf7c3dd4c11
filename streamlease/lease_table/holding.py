"""While a lease is held: renew a per-stream lease, record the connection and progress, release
(architecture §4)."""

from __future__ import annotations

from typing import Any

from streamlease import dynamo, rules
from streamlease.errors import LeaseLost, StoreError, StreamStopped
from streamlease.indexes import expiry_shard
from streamlease.lease_table.layout import (
    _A,
    _EXPIRY_GROWS,
    _HELD_BY_ME,
    _SEQ_NOT_BACK,
    _STARTED,
    _all,
    _held,
    _loss_reason,
    _progress_sets,
    _state,
)
from streamlease.lease_table.table import LeaseTable
from streamlease.model import Stream, StreamProgress, is_tombstone, iso_ms
from streamlease.schema import ConnectionState, DesiredState, stream_key


class LeaseHolding(LeaseTable):
    """:meth:`renew`, :meth:`release`, :meth:`record_connection` and :meth:`record_progress` of
    :class:`~streamlease.lease_store.LeaseStore`."""

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
        was taken from this holding (the final checkpoint was *not* written), or when the
        release cannot tell (another holding has released the stream since as well).
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
