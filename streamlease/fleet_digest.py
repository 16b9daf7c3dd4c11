"""The fleet digest: one small item with the fair share of a large fleet, written by its elected
watcher (architecture §4a at fleet scale).

In a fleet of more than :data:`~streamlease.rules.FULL_READ_MAX_SESSIONS` sessions no worker
reads every worker item each second but one: the digest's *writer*, elected by a lease on this
very item (``writer`` + ``writer_expires_at_ms``, taken over with a conditional write once it
has lapsed by the clock-skew allowance, like a per-stream lease). It reads the fleet, judges
dead sessions like every watcher, and publishes what the fair share needs (live workers,
streams, the deficit below the share); the others read it every few seconds (one GetItem,
half a read unit). Nothing safety-related depends on it: a stale or missing digest only
delays balancing, and two workers that both believe they write it publish the same counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streamlease import dynamo
from streamlease.lease_store import wall_ms
from streamlease.placement import FleetLoad
from streamlease.schema import FLEET_DIGEST_KEY, PK, DigestAttr

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

_D = DigestAttr
_NAMES: Final = {
    "#pk": PK,
    "#w": _D.WRITER,
    "#wexp": _D.WRITER_EXPIRES_AT_MS,
    "#at": _D.WRITTEN_AT_MS,
    "#sessions": _D.SESSIONS,
    "#live": _D.LIVE_WORKERS,
    "#total": _D.TOTAL_STREAMS,
    "#deficit": _D.DEFICIT,
    "#surplus": _D.SURPLUS,
    "#fill": _D.FILL_TO_SHARE,
    "#fat": _D.FILL_WRITTEN_AT_MS,
    "#lmean": _D.LOAD_MEAN_MILLI,
    "#lroom": _D.LOAD_ROOM_MILLI,
    "#lsurplus": _D.LOAD_SURPLUS_MILLI,
}
_KEY: Final = {PK: FLEET_DIGEST_KEY}


@dataclass(frozen=True)
class FleetDigest:
    """What the digest says, and who wrote it until when."""

    writer: str
    writer_expires_at_ms: int
    written_at_ms: int = 0
    sessions: int = 0
    live_workers: int = 0
    total_streams: int = 0
    deficit: int = 0
    surplus: int = 0
    fill_to_share: bool = False
    """Takers fill up to the share, not the share rounded down (the deficit is counted to it:
    :attr:`worker.ownership.fleet_view.FleetView.fill_to_share`)."""
    load: FleetLoad | None = None
    """The fleet's load as the writer counted it; None: counts decide."""

    def fresh(self, now_ms: int) -> bool:
        """Its writer's claim still stands at ``now_ms`` (wall): the counts are current."""
        return now_ms <= self.writer_expires_at_ms

    def claimable(self, now_ms: int, clock_skew_ms: int) -> bool:
        """Another worker may take it over: the claim lapsed more than the skew allowance ago."""
        return self.writer_expires_at_ms < now_ms - clock_skew_ms

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> FleetDigest:
        """From the item's plain values (``fill_to_share`` only when the last writer wrote
        it)."""
        current = item.get(_D.FILL_WRITTEN_AT_MS) == item.get(_D.WRITTEN_AT_MS)
        return cls(
            writer=str(item.get(_D.WRITER, "")),
            writer_expires_at_ms=int(item.get(_D.WRITER_EXPIRES_AT_MS, 0)),
            written_at_ms=int(item.get(_D.WRITTEN_AT_MS, 0)),
            sessions=int(item.get(_D.SESSIONS, 0)),
            live_workers=int(item.get(_D.LIVE_WORKERS, 0)),
            total_streams=int(item.get(_D.TOTAL_STREAMS, 0)),
            deficit=int(item.get(_D.DEFICIT, 0)),
            surplus=int(item.get(_D.SURPLUS, 0)),
            fill_to_share=bool(item.get(_D.FILL_TO_SHARE, False)) and current,
            load=_load_from(item),
        )


class DigestStore:
    """Reads, claims and writes the fleet digest item."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        clock_skew_ms: int = 1000,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        """``client``: a boto3 DynamoDB client; ``clock_ms``: wall milliseconds."""
        self._client = client
        self._table = table_name
        self._skew_ms = clock_skew_ms
        self._clock_ms = clock_ms

    def read(self) -> FleetDigest | None:
        """The digest (eventually consistent), or None when there is none yet. Raises
        :class:`StoreError`."""
        response = dynamo.call(
            self._client.get_item, TableName=self._table, Key=dynamo.serialize(_KEY)
        )
        item = response.get("Item")
        return None if item is None else FleetDigest.from_item(dynamo.plain(item))

    def claim(self, me: str, lease_ms: int) -> bool:
        """Become the writer for ``lease_ms`` if there is no digest, it is ours, or its writer's
        claim lapsed (by the skew allowance). True when this call won. Raises
        :class:`StoreError`."""
        now = self._clock_ms()
        try:
            dynamo.update(
                self._client,
                self._table,
                _KEY,
                "SET #w = :me, #wexp = :exp",
                "attribute_not_exists(#pk) OR #w = :me OR #wexp < :cutoff",
                _NAMES,
                {":me": me, ":exp": now + lease_ms, ":cutoff": now - self._skew_ms},
            )
        except dynamo.ConditionFailed:
            return False
        return True

    def publish(
        self,
        me: str,
        lease_ms: int,
        *,
        sessions: int,
        live: int,
        total: int,
        deficit: int,
        surplus: int = 0,
        fill_to_share: bool = False,
        load: FleetLoad | None = None,
    ) -> bool:
        """Write the counts (and the fleet's load, None: removed) and extend the claim, if
        ``me`` is the writer. False when it is not (another worker took the digest over: stop
        writing). Raises :class:`StoreError`."""
        now = self._clock_ms()
        values: dict[str, Any] = {
            ":me": me,
            ":exp": now + lease_ms,
            ":now": now,
            ":sessions": sessions,
            ":live": live,
            ":total": total,
            ":deficit": deficit,
            ":surplus": surplus,
            ":fill": fill_to_share,
        }
        update = (
            "SET #wexp = :exp, #at = :now, #sessions = :sessions, #live = :live,"
            " #total = :total, #deficit = :deficit, #surplus = :surplus,"
            " #fill = :fill, #fat = :now"
        )
        if load is None:
            update += " REMOVE #lmean, #lroom, #lsurplus"
        else:
            update += ", #lmean = :lmean, #lroom = :lroom, #lsurplus = :lsurplus"
            values[":lmean"] = round(load.mean * 1000)
            values[":lroom"] = round(load.room * 1000)
            values[":lsurplus"] = round(load.surplus * 1000)
        try:
            dynamo.update(self._client, self._table, _KEY, update, "#w = :me", _NAMES, values)
        except dynamo.ConditionFailed:
            return False
        return True

    def resign(self, me: str) -> None:
        """Give the digest up (a draining writer): claimable at once. Raises
        :class:`StoreError`."""
        try:
            dynamo.update(
                self._client,
                self._table,
                _KEY,
                "SET #wexp = :zero",
                "#w = :me",
                _NAMES,
                {":me": me, ":zero": 0},
            )
        except dynamo.ConditionFailed:
            return


def _load_from(item: Mapping[str, Any]) -> FleetLoad | None:
    mean = item.get(_D.LOAD_MEAN_MILLI)
    if mean is None:
        return None
    return FleetLoad(
        mean=int(mean) / 1000,
        room=int(item.get(_D.LOAD_ROOM_MILLI, 0)) / 1000,
        surplus=int(item.get(_D.LOAD_SURPLUS_MILLI, 0)) / 1000,
    )
