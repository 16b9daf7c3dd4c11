"""DynamoDB plumbing shared by the lease store, the API's stream repository, the reaper and the
auditor: values converted, errors translated into :mod:`streamlease.errors`, pages followed.

A failed condition is not an error here but :class:`ConditionFailed`, carrying the item as it
was (the callers ask for ``ReturnValuesOnConditionCheckFailure=ALL_OLD``) so each can say why.

Every helper takes the client *method* to call (``client.update_item``, ``client.query``), not
an operation name, so mypy checks each request against DynamoDB's API (the client types come
from the dev extras' stubs and are imported for type checking only). boto3 and botocore are
imported on first use, as a client is: a Lambda handler importing this module at a cold start
does not pay for the SDK before it makes a client.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

from streamlease.errors import StoreError

if TYPE_CHECKING:
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.literals import ReturnValueType
    from types_boto3_dynamodb.type_defs import (
        QueryInputTypeDef,
        QueryOutputTypeDef,
        ScanInputTypeDef,
        ScanOutputTypeDef,
    )

    _Request = QueryInputTypeDef | ScanInputTypeDef
    _Page = QueryOutputTypeDef | ScanOutputTypeDef

_P = ParamSpec("_P")
_R = TypeVar("_R")

_CONDITION_FAILED: Final = "ConditionalCheckFailedException"
BATCH_GET_MAX: Final = 100
"""Most keys one BatchGetItem may ask for."""
_BATCH_GET_ROUNDS: Final = 5


_PLACEHOLDER: Final = re.compile(r"#[A-Za-z0-9_]+")


def placeholders(names: Mapping[str, str], *expressions: str) -> dict[str, str]:
    """``ExpressionAttributeNames`` for ``expressions``: every ``#placeholder`` they use, looked
    up in ``names`` (DynamoDB refuses names that no expression uses). Raises ``KeyError`` for a
    placeholder ``names`` does not define."""
    used = {token for text in expressions for token in _PLACEHOLDER.findall(text)}
    return {token: names[token] for token in sorted(used)}


@functools.cache
def _converters() -> tuple[TypeSerializer, TypeDeserializer]:
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

    return TypeSerializer(), TypeDeserializer()


def serialize(values: Mapping[str, Any]) -> dict[str, Any]:
    """Plain Python values as DynamoDB attribute values."""
    serializer = _converters()[0]
    return {k: serializer.serialize(v) for k, v in values.items()}


def plain(item: Mapping[str, Any]) -> dict[str, Any]:
    """A DynamoDB item as plain Python values (numbers are ``Decimal``)."""
    deserializer = _converters()[1]
    return {k: deserializer.deserialize(v) for k, v in item.items()}


class ConditionFailed(Exception):
    """A conditional write's condition did not hold; ``old`` is the item as it was (None if
    there was none)."""

    def __init__(self, old: dict[str, Any] | None) -> None:
        super().__init__("condition failed")
        self.old = old


def call(operation: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """One DynamoDB call: ``operation`` (a client method, ``client.update_item``) with these
    arguments. Raises :class:`ConditionFailed` when a condition did not hold and
    :class:`StoreError` for anything else DynamoDB or the network did (``ClientError``,
    ``BotoCoreError``)."""
    from botocore.exceptions import BotoCoreError, ClientError  # loaded with the client

    name = getattr(operation, "__name__", "call")
    try:
        return operation(*args, **kwargs)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Unknown")
        if code == _CONDITION_FAILED:
            # Not in botocore's error shape: added for ReturnValuesOnConditionCheckFailure.
            old = exc.response.get("Item")
            raise ConditionFailed(plain(old) if isinstance(old, Mapping) else None) from None
        raise StoreError(f"DynamoDB {name} failed: {code}") from exc
    except BotoCoreError as exc:
        raise StoreError(f"DynamoDB {name} failed: {type(exc).__name__}") from exc


def update(
    client: DynamoDBClient,
    table: str,
    key: Mapping[str, Any],
    update_expression: str,
    condition: str,
    names: Mapping[str, str],
    values: Mapping[str, Any],
    *,
    returns: ReturnValueType = "NONE",
) -> dict[str, Any]:
    """One conditional ``UpdateItem`` of the item at ``key`` (plain values), its attribute
    names given as ``#placeholders`` looked up in ``names``. Returns the attributes
    ``returns`` asks for, as plain values; raises :class:`ConditionFailed` carrying the item as
    it was, :class:`StoreError` when unanswered."""
    response = call(
        client.update_item,
        TableName=table,
        Key=serialize(key),
        UpdateExpression=update_expression,
        ConditionExpression=condition,
        ExpressionAttributeNames=placeholders(names, update_expression, condition),
        ExpressionAttributeValues=serialize(values),
        ReturnValues=returns,
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    return plain(response.get("Attributes", {}))


def items(
    read: Callable[..., _Page], request: _Request, *, limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """The items of a Query or Scan (``read``: ``client.query`` or ``client.scan``) as plain
    values, following the pages; at most ``limit`` (None: all)."""
    pending: dict[str, Any] = dict(request)
    seen = 0
    while limit is None or seen < limit:
        if limit is not None:
            pending["Limit"] = limit - seen
        page = call(read, **pending)
        for item in page.get("Items", []):
            yield plain(item)
            seen += 1
        start = page.get("LastEvaluatedKey")
        if not start:
            return
        pending["ExclusiveStartKey"] = start


def batch_get(
    client: DynamoDBClient, table: str, keys: list[dict[str, Any]], projection: list[str]
) -> list[dict[str, Any]]:
    """Items for ``keys`` (plain key dicts), only the ``projection`` attributes; missing skipped.

    Unprocessed keys are asked again a few times; raises :class:`StoreError` if some remain.
    """
    names = {f"#a{i}": name for i, name in enumerate(projection)}
    found: list[dict[str, Any]] = []
    for start in range(0, len(keys), BATCH_GET_MAX):
        pending: dict[str, Any] = {
            table: {
                "Keys": [serialize(k) for k in keys[start : start + BATCH_GET_MAX]],
                "ProjectionExpression": ", ".join(names),
                "ExpressionAttributeNames": names,
            }
        }
        for attempt in range(_BATCH_GET_ROUNDS):
            if attempt:
                time.sleep(0.05 * 2**attempt)  # unprocessed keys mean throttling: back off
            response = call(client.batch_get_item, RequestItems=pending)
            found += [plain(i) for i in response.get("Responses", {}).get(table, [])]
            pending = response.get("UnprocessedKeys") or {}
            if not pending:
                break
        if pending:
            raise StoreError("DynamoDB batch_get_item left keys unprocessed")
    return found
