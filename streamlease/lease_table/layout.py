"""How a stream's lease is laid out on its item, and how the store's writes read it back.

Attribute names only ever reach DynamoDB through ``#placeholders`` (:data:`_NAMES`), so no
attribute can collide with a reserved word, and conditions are built from named clauses. The
helpers here read an item as a failed condition returned it (whose is it, why was it lost) and
turn a written item into a :class:`~streamlease.model.Lease`. Shared by the parts of
:class:`~streamlease.lease_store.LeaseStore` (this package); nothing else imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from streamlease import dynamo
from streamlease.model import Lease, Stream, StreamProgress, is_tombstone
from streamlease.schema import (
    PK,
    StreamAttr,
)

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


def _all(*clauses: str) -> str:
    return " AND ".join(clauses)


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
