"""Worker items as *sessions* (architecture §4a): create, renew, drain, expire, list, delete.

A worker item ``WORKER#<id>`` is its process's session, like an etcd lease or a ZooKeeper
session: one id per process incarnation, renewed by one conditional ``UpdateItem`` per heartbeat
that carries the checkpoint vector of every stream attached to it. Every write after the create
is conditional, so the item's life only moves forward:

- **renew**: ``state`` is RUNNING or DRAINING and the stored expiry is below the new one, so a
  renewal applied late (after a newer one, or after the tombstone) changes nothing. It never
  touches ``state``: a renewal in flight cannot undo DRAINING.
- **drain**: RUNNING → DRAINING.
- **expire** (the tombstone): a live state → EXPIRED, once, by a peer that read the same ``hb``
  for a whole lease (condition ``hb = :seen``: one winner, and a renewal that got in first wins
  instead), by the reaper for a task ECS says is gone, or by the worker itself after a drain.
  ``ALL_NEW`` hands the winner the dead session's checkpoint vector.
- **delete**: only a tombstone, once nothing is attached to it any more. Gone means gone: a
  renewal's condition fails on a missing item, and a worker id is never reused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo
from streamlease.errors import SessionExpired, StoreError
from streamlease.indexes import FLEET
from streamlease.lease_store import wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import PK, WORKER_KIND, WorkerAttr, WorkerState, worker_key

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.literals import ReturnValueType
    from types_boto3_dynamodb.type_defs import QueryInputTypeDef

_W = WorkerAttr
_NAMES: Final = {
    "#pk": PK,
    "#kind": _W.KIND,
    "#state": _W.STATE,
    "#hb": _W.HB,
    "#exp": _W.EXPIRES_AT_MS,
    "#hbat": _W.HEARTBEAT_AT_MS,
    "#active": _W.ACTIVE_STREAMS,
    "#cap": _W.CAPACITY,
    "#load": _W.LOAD_MILLI,
    "#cpu": _W.CPU_PERMILLE,
    "#cps": _W.CHECKPOINTS,
    "#xat": _W.EXPIRED_AT_MS,
    "#xby": _W.EXPIRED_BY,
}
_NEW: Final = "attribute_not_exists(#pk)"
_LIVE: Final = "#state IN (:running, :draining)"
_EXPIRY_GROWS: Final = "#exp < :exp"
_SAME_HB: Final = "#hb = :seen"
_ITEM_ATTRIBUTES: Final = [
    value for name, value in vars(WorkerAttr).items() if not name.startswith("_")
]
_LOAD_ATTRIBUTES: Final = [_W.WORKER_ID, _W.LOAD_MILLI, _W.CPU_PERMILLE]
_LIVE_VALUES: Final = {
    ":running": WorkerState.RUNNING.value,
    ":draining": WorkerState.DRAINING.value,
}


@dataclass(frozen=True)
class WorkerLoad:
    """One worker's published load figures (:attr:`WorkerInfo.load_milli`,
    :attr:`WorkerInfo.cpu_permille`; None: not published)."""

    load_milli: int | None
    cpu_permille: int | None


@dataclass(frozen=True)
class FleetPage:
    """One page of the fleet index: its worker items, and where the next page starts (None:
    the index ends here)."""

    sessions: list[WorkerInfo]
    more: Mapping[str, Any] | None


@dataclass(frozen=True)
class Expiry:
    """What an attempt to expire a session found: ``won`` (this call wrote the tombstone) and
    the session as it is now (with its checkpoint vector when ``won``), None if it is gone."""

    won: bool
    session: WorkerInfo | None


class SessionStore:
    """Conditional writes and reads of worker items (sessions)."""

    def __init__(
        self, client: DynamoDBClient, table_name: str, *, clock_ms: Callable[[], int] = wall_ms
    ) -> None:
        """``client``: a boto3 DynamoDB client; ``clock_ms``: for calls given no ``now_ms``."""
        self._client = client
        self._table = table_name
        self._clock_ms = clock_ms

    def create(self, info: WorkerInfo) -> None:
        """Write a new session. A retried create of this very session (same id, start time and
        still live) succeeds; raises :class:`SessionExpired` if the id is taken otherwise (a
        reused id, or the session already expired), :class:`StoreError` when unanswered."""
        try:
            dynamo.call(
                self._client.put_item,
                TableName=self._table,
                Item=dynamo.serialize(info.to_item()),
                ConditionExpression=_NEW,
                ExpressionAttributeNames=_names(_NEW),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except dynamo.ConditionFailed as failed:
            old = None if failed.old is None else WorkerInfo.from_item(failed.old)
            if old is None or not old.is_live or old.started_at_ms != info.started_at_ms:
                raise SessionExpired(info.worker_id) from None

    def renew(
        self,
        worker_id: str,
        *,
        expires_at_ms: int,
        now_ms: int,
        active_streams: int,
        capacity: int | None = None,
        checkpoints: bytes | None = None,
        load_milli: int | None = None,
        cpu_permille: int | None = None,
    ) -> None:
        """One renewal: ``hb`` + 1, the new expiry, the stream count, the capacity the worker
        can use now (None: unchanged), (sessions) the vector, and the worker's load
        (thousandths of a load unit per second) and CPU use (thousandths of a core), each
        None: unchanged. The load rides on this write, which is sent anyway.

        ``expires_at_ms`` must be above every expiry this session sent before
        (:func:`streamlease.rules.next_session_expiry_ms`). Raises :class:`SessionExpired` when
        the session is a tombstone or gone, :class:`StoreError` when unanswered or overtaken by
        a newer renewal (whose effect stands).
        """
        sets = ["#hb = #hb + :one", "#exp = :exp", "#hbat = :now", "#active = :active"]
        values: dict[str, Any] = {
            ":one": 1,
            ":exp": expires_at_ms,
            ":now": now_ms,
            ":active": active_streams,
            **_LIVE_VALUES,
        }
        if capacity is not None:
            sets.append("#cap = :cap")
            values[":cap"] = capacity
        if checkpoints is not None:
            sets.append("#cps = :cps")
            values[":cps"] = checkpoints
        if load_milli is not None:
            sets.append("#load = :load")
            values[":load"] = max(0, load_milli)
        if cpu_permille is not None:
            sets.append("#cpu = :cpu")
            values[":cpu"] = max(0, cpu_permille)
        try:
            self._update(
                worker_id, "SET " + ", ".join(sets), f"{_LIVE} AND {_EXPIRY_GROWS}", values
            )
        except dynamo.ConditionFailed as failed:
            old = None if failed.old is None else WorkerInfo.from_item(failed.old)
            if old is None or not old.is_live:
                raise SessionExpired(worker_id) from None
            raise StoreError("session renewal overtaken by a newer one") from None

    def mark_draining(self, worker_id: str) -> None:
        """RUNNING → DRAINING (idempotent). Raises :class:`SessionExpired`, :class:`StoreError`."""
        try:
            self._update(
                worker_id,
                "SET #state = :draining",
                _LIVE,
                _LIVE_VALUES,
            )
        except dynamo.ConditionFailed:
            raise SessionExpired(worker_id) from None

    def expire(
        self, worker_id: str, *, by: str, seen_hb: int | None, now_ms: int | None = None
    ) -> Expiry:
        """Write the tombstone: a live session → EXPIRED, recording when and by whom.

        ``seen_hb``: the ``hb`` the caller read unchanged for a whole lease (the condition, so a
        session that renewed since wins); None for a session known dead otherwise (the reaper:
        ECS says the task has stopped; the worker itself after its drain).
        """
        now = self._clock_ms() if now_ms is None else now_ms
        condition = _LIVE if seen_hb is None else f"{_LIVE} AND {_SAME_HB}"
        values: dict[str, Any] = {
            ":expired": WorkerState.EXPIRED.value,
            ":now": now,
            ":by": by,
            **_LIVE_VALUES,
        }
        if seen_hb is not None:
            values[":seen"] = seen_hb
        try:
            item = self._update(
                worker_id,
                "SET #state = :expired, #xat = :now, #xby = :by",
                condition,
                values,
                returns="ALL_NEW",
            )
        except dynamo.ConditionFailed as failed:
            return Expiry(False, None if failed.old is None else WorkerInfo.from_item(failed.old))
        return Expiry(True, WorkerInfo.from_item(item))

    def delete(self, worker_id: str) -> bool:
        """Delete a tombstone (call once no stream is attached to it). Returns False when it
        was not one (still live: left alone) or is gone already."""
        try:
            dynamo.call(
                self._client.delete_item,
                TableName=self._table,
                Key=_key(worker_id),
                ConditionExpression="#state = :expired",
                ExpressionAttributeNames=_names("#state"),
                ExpressionAttributeValues=dynamo.serialize({":expired": WorkerState.EXPIRED.value}),
            )
        except dynamo.ConditionFailed:
            return False
        return True

    def read(self, worker_id: str, *, consistent: bool = True) -> WorkerInfo | None:
        """The whole worker item (checkpoint vector included), or None."""
        response = dynamo.call(
            self._client.get_item,
            TableName=self._table,
            Key=_key(worker_id),
            ConsistentRead=consistent,
        )
        item = response.get("Item")
        return None if item is None else WorkerInfo.from_item(dynamo.plain(item))

    def read_many(self, worker_ids: Iterable[str]) -> dict[str, WorkerInfo]:
        """The whole worker items (vectors included) of ``worker_ids`` that exist, by id; one
        eventually consistent BatchGetItem per 100 ids."""
        keys = [{PK: worker_key(w)} for w in sorted(set(worker_ids))]
        items = dynamo.batch_get(self._client, self._table, keys, _ITEM_ATTRIBUTES)
        return {info.worker_id: info for info in map(WorkerInfo.from_item, items)}

    def read_loads(self, worker_ids: Iterable[str]) -> dict[str, WorkerLoad]:
        """The load figures of those of ``worker_ids`` whose items exist, by id, from the items
        (the ``fleet`` index does not carry them). One eventually consistent BatchGetItem per
        100 ids; each item costs its full size in read units. Raises :class:`StoreError`."""
        keys = [{PK: worker_key(w)} for w in sorted(set(worker_ids))]
        items = dynamo.batch_get(self._client, self._table, keys, _LOAD_ATTRIBUTES)
        return {
            info.worker_id: WorkerLoad(info.load_milli, info.cpu_permille)
            for info in map(WorkerInfo.from_item, items)
        }

    def fleet_after(
        self, session: WorkerInfo | None, limit: int, *, cursor: Mapping[str, Any] | None = None
    ) -> FleetPage:
        """Up to ``limit`` worker items in the fleet index's order (by start time): those after
        ``session``, from the first (``session`` None), or where a previous page stopped
        (``cursor``: its :attr:`FleetPage.more`). One eventually consistent query; no
        checkpoint vectors."""
        request: QueryInputTypeDef = {
            "TableName": self._table,
            "IndexName": FLEET.name,
            "KeyConditionExpression": "#kind = :kind",
            "ExpressionAttributeNames": _names("#kind"),
            "ExpressionAttributeValues": dynamo.serialize({":kind": WORKER_KIND}),
            "Limit": max(1, limit),
        }
        if cursor is not None:
            request["ExclusiveStartKey"] = dict(cursor)
        elif session is not None:
            request["ExclusiveStartKey"] = dynamo.serialize(
                {
                    _W.KIND: WORKER_KIND,
                    _W.STARTED_AT_MS: session.started_at_ms,
                    PK: worker_key(session.worker_id),
                }
            )
        page = dynamo.call(self._client.query, **request)
        items = [WorkerInfo.from_item(dynamo.plain(i)) for i in page.get("Items", [])]
        return FleetPage(items, page.get("LastEvaluatedKey") or None)

    def list_fleet(self) -> list[WorkerInfo]:
        """Every worker item, live or tombstone, oldest session first (the fleet index:
        eventually consistent, no checkpoint vectors)."""
        return [
            WorkerInfo.from_item(item)
            for item in dynamo.items(
                self._client.query,
                {
                    "TableName": self._table,
                    "IndexName": FLEET.name,
                    "KeyConditionExpression": "#kind = :kind",
                    "ExpressionAttributeNames": _names("#kind"),
                    "ExpressionAttributeValues": dynamo.serialize({":kind": WORKER_KIND}),
                },
            )
        ]

    # --- plumbing ----------------------------------------------------------------------------

    def _update(
        self,
        worker_id: str,
        update: str,
        condition: str,
        values: Mapping[str, Any],
        *,
        returns: ReturnValueType = "NONE",
    ) -> dict[str, Any]:
        return dynamo.update(
            self._client,
            self._table,
            {PK: worker_key(worker_id)},
            update,
            condition,
            _NAMES,
            values,
            returns=returns,
        )


def _key(worker_id: str) -> dict[str, Any]:
    return {PK: {"S": worker_key(worker_id)}}


def _names(*expressions: str) -> dict[str, str]:
    return dynamo.placeholders(_NAMES, *expressions)
