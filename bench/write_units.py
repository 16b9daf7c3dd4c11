"""How many DynamoDB write units a write request costs, index writes included.

DynamoDB bills a write to the table (1 unit per started KB of the larger of the old and the new
item) *plus* a write to every global secondary index the change touches: an index entry whose
key attributes change is deleted and re-inserted (2 units), one that appears or disappears costs
1, and one whose projected non-key attributes change is rewritten (1). A conditional write whose
condition fails still costs its table unit but touches no index. Every per-stream renewal
changes ``lease_expires_at_ms``, the sort key of the orphan index ``by-shard-expiry``: 1 + 2
units, not 1.

This module is pure: it classifies one request from its parameters (what the client sent) and
outcome. Whether an item was in a sparse index *before* a write is not in the request, so it is
inferred from the condition (``attribute_not_exists(lease_owner)`` → it was not;
``lease_owner = :x`` → it was) and, for worker items, from whether this process wrote the key
before (worker ids are unique per process). The table's units follow the item's size: the
values the request writes plus :data:`ITEM_OVERHEAD_BYTES` for what it leaves as it was
(stream items stay under 1 KB; a session's checkpoint vector can make its item larger).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from streamlease.indexes import INDEXES, IndexSpec
from streamlease.schema import PK, STREAM_PREFIX, WORKER_PREFIX, WorkerAttr

WRITE_OPERATIONS: Final = frozenset({"UpdateItem", "PutItem", "DeleteItem"})
READ_OPERATIONS: Final = frozenset({"GetItem", "Query", "Scan", "BatchGetItem"})

_CLAUSE = re.compile(r"\b(SET|REMOVE|ADD|DELETE)\b", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"#[A-Za-z0-9_]+")
ITEM_OVERHEAD_BYTES: Final = 400
"""Generous size of an item's attributes a write leaves unchanged (names, ids, timestamps)."""


@dataclass(frozen=True)
class WriteCost:
    """Units one write request costs: the table's and the indexes' (by index name)."""

    base: int
    index: Mapping[str, int]

    @property
    def total(self) -> int:
        """Table plus index write units."""
        return self.base + sum(self.index.values())


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (``if_not_exists(a, :z) + :one`` stays whole)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _resolve(path: str, names: Mapping[str, str]) -> str:
    top = re.split(r"[.\[]", path.strip(), maxsplit=1)[0]
    return names.get(top, top)


def changed_attributes(
    update_expression: str, names: Mapping[str, str] | None = None
) -> tuple[set[str], set[str]]:
    """Top-level attributes an ``UpdateExpression`` sets (SET/ADD) and removes (REMOVE/DELETE).

    ``names`` resolves ``#placeholders`` (``ExpressionAttributeNames``).
    """
    names = names or {}
    chunks = _CLAUSE.split(update_expression)
    set_attrs: set[str] = set()
    removed: set[str] = set()
    for keyword, body in zip(chunks[1::2], chunks[2::2], strict=False):
        keyword = keyword.upper()
        for action in _split_top_level(body):
            if keyword == "SET":
                set_attrs.add(_resolve(action.split("=", 1)[0], names))
            elif keyword == "ADD":
                set_attrs.add(_resolve(action.split()[0], names))
            else:
                removed.add(_resolve(action.split()[0], names))
    return set_attrs, removed


def _index_keys(index: IndexSpec) -> set[str]:
    return {index.partition_key} | ({index.sort_key} if index.sort_key else set())


def _mentions_absent(condition: str, attribute: str) -> bool:
    return (
        re.search(rf"attribute_not_exists\(\s*{re.escape(attribute)}\s*\)", condition) is not None
    )


def _mentions_equal(condition: str, attribute: str) -> bool:
    return re.search(rf"\b{re.escape(attribute)}\s*=\s*:", condition) is not None


class IndexMembership:
    """Remembers which items this process saw enter or leave each index."""

    def __init__(self, indexes: Iterable[IndexSpec] = INDEXES) -> None:
        self.indexes = tuple(indexes)
        self._known: dict[tuple[str, str], bool] = {}

    def was_in(self, key: str, index: IndexSpec, condition: str) -> bool:
        """Best knowledge of whether item ``key`` had an entry in ``index`` before a write."""
        known = self._known.get((key, index.name))
        if known is not None:
            return known
        keys = _index_keys(index)
        if _mentions_absent(condition, PK) or any(_mentions_absent(condition, k) for k in keys):
            return False
        if any(_mentions_equal(condition, k) for k in keys):
            return True
        if key.startswith(WORKER_PREFIX):
            return False  # worker ids are unique per process: its first write creates the item
        # Stream items always carry desired_state and lease_expires_at_ms, never kind; the
        # orphan index's expiry_shard only while no session holds the stream, which a request
        # alone does not tell (this guess counts a first write to a held stream one unit high).
        return key.startswith(STREAM_PREFIX) and index.partition_key != WorkerAttr.KIND

    def note(self, key: str, index: IndexSpec, present: bool) -> None:
        """Record the item's membership after a successful write."""
        self._known[(key, index.name)] = present


def write_cost(
    operation: str,
    params: Mapping[str, Any],
    succeeded: bool,
    membership: IndexMembership,
) -> WriteCost:
    """Write units of one ``UpdateItem``/``PutItem``/``DeleteItem`` request (1 KB items).

    Updates ``membership`` after a successful write. A failed conditional write costs its table
    unit only. Raises ``ValueError`` for another operation.
    """
    if operation not in WRITE_OPERATIONS:
        raise ValueError(f"not a single-item write: {operation}")
    key = str(_plain(params.get("Key", {}).get(PK) or params.get("Item", {}).get(PK) or ""))
    base = table_units(params)
    if not succeeded:
        return WriteCost(base, {})
    names = params.get("ExpressionAttributeNames") or {}
    condition = _PLACEHOLDER.sub(
        lambda m: str(names.get(m.group(0), m.group(0))),
        str(params.get("ConditionExpression", "")),
    )
    costs: dict[str, int] = {}
    for index in membership.indexes:
        keys = _index_keys(index)
        before = membership.was_in(key, index, condition)
        if operation == "DeleteItem":
            cost, after = (1 if before else 0), False
        elif operation == "PutItem":
            after = keys <= set(params.get("Item", {}))
            # A re-put is charged as a key change (2): its keys (an expiry) usually move.
            cost = (2 if before else 1) if after else (1 if before else 0)
        else:
            set_attrs, removed = changed_attributes(str(params.get("UpdateExpression", "")), names)
            projected = set(index.projected or ())
            if keys & removed:
                cost, after = (1 if before else 0), False
            elif keys & set_attrs:
                cost = 2 if before else 1
                after = True
            elif before and projected & (set_attrs | removed):
                cost, after = 1, True
            else:
                cost, after = 0, before
        if cost:
            costs[index.name] = cost
        membership.note(key, index, after)
    return WriteCost(base, costs)


def table_units(params: Mapping[str, Any]) -> int:
    """The table's write units of one request: 1 per started KB of the item's estimated size."""
    written = sum(_value_bytes(v) for v in (params.get("ExpressionAttributeValues") or {}).values())
    written += sum(_value_bytes(v) for v in (params.get("Item") or {}).values())
    return max(1, -(-(written + ITEM_OVERHEAD_BYTES) // 1024))


def item_size_bytes(item: Mapping[str, Any]) -> int:
    """An item's size by DynamoDB's billing rule, from a low-level client's item
    (``{"name": {"S": ...}}``): per attribute its name's UTF-8 length plus its value's size.

    A string is its UTF-8 length, binary its length, a number about one byte per two significant
    digits plus one, a boolean or null one byte; a list or map 3 bytes plus 1 per element plus
    the elements (a map's keys included).
    """
    return sum(len(name.encode()) + _attribute_bytes(value) for name, value in item.items())


def _attribute_bytes(value: Mapping[str, Any]) -> int:
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return len(str(inner).encode())
    if kind == "B":
        return len(inner)
    if kind == "N":
        digits = str(inner).lstrip("-").replace(".", "").strip("0") or "0"
        return -(-len(digits) // 2) + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _attribute_bytes(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_attribute_bytes(v) + 1 for v in inner)
    if kind in ("SS", "BS", "NS"):
        return sum(_attribute_bytes({kind[0]: v}) for v in inner)
    return 8


def _value_bytes(value: Any) -> int:
    """Size of one attribute value as sent by a low-level client (``{"S": ...}``, ``{"B": ...}``,
    ``{"N": "..."}``); other shapes count a few bytes."""
    if isinstance(value, Mapping) and len(value) == 1:
        inner = next(iter(value.values()))
        if isinstance(inner, bytes | bytearray | str):
            return len(inner)
    return 8


def read_units(operation: str, params: Mapping[str, Any], response_bytes: int) -> float:
    """Read units of one read request, estimated from the size of the answer.

    4 KB per unit, half a unit for an eventually consistent read, at least one half unit.
    The answer's JSON is larger than DynamoDB's item-size accounting, so this errs high.
    """
    if operation not in READ_OPERATIONS:
        return 0.0
    per_unit = 1.0 if params.get("ConsistentRead") else 0.5
    blocks = max(1, -(-response_bytes // 4096))
    return blocks * per_unit


def _plain(value: Any) -> Any:
    """A key value as sent by a low-level client (``{"S": "..."}``) or a resource (``"..."``)."""
    if isinstance(value, Mapping) and len(value) == 1:
        return next(iter(value.values()))
    return value
