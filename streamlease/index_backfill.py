"""``python -m streamlease.index_backfill``: give every stream item the orphan-index entry its
state calls for (:mod:`streamlease.expiry_index`), once.

Run it while moving a deployed table to ``by-shard-expiry`` (docs/deploying.md, "Moving a deployed
table to this release"), after the new index exists and the new release runs: streams that became
free before (never leased, released by the previous release) have no ``expiry_shard`` yet, and only
a start command would reach them. Run it again after switching the fleet's liveness mode: each mode
keys the index its own way. It reads the table and its settings like a worker
(``STREAMLEASE_TABLE_NAME``, ``STREAMLEASE_AWS_REGION``, ``STREAMLEASE_LIVENESS``, ...), scans the
stream items once (a read of the whole table), and writes only where an entry is missing, stale or
wrong, each write conditional on the state it read: safe beside a running fleet, and safe to run
again.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from streamlease import aws, dynamo, expiry_index
from streamlease.schema import PK, STREAM_PREFIX, Liveness, StreamAttr
from streamlease.settings import Settings

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

PARALLEL_WRITES: Final = 16
_READ: Final = (
    PK,
    StreamAttr.STREAM_ID,
    StreamAttr.DESIRED_STATE,
    StreamAttr.LEASE_SLOT,
    StreamAttr.EXPIRY_SHARD,
)


def stream_items(client: DynamoDBClient, table: str) -> Iterator[dict[str, Any]]:
    """Every stream item's few attributes the entry depends on (a scan of the table)."""
    names = {f"#a{i}": a for i, a in enumerate(_READ)}
    return dynamo.items(
        client.scan,
        {
            "TableName": table,
            "FilterExpression": "begins_with(#a0, :prefix)",
            "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": dynamo.serialize({":prefix": STREAM_PREFIX}),
        },
    )


def backfill(client: DynamoDBClient, table: str, liveness: Liveness) -> Counter[str]:
    """Align every stream item's entry; returns how many were ``added``, ``removed``,
    ``rekeyed`` and ``checked``. Raises :class:`StoreError` when the table does not answer."""
    done: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=PARALLEL_WRITES) as pool:
        for outcome in pool.map(
            lambda item: expiry_index.align(client, table, item, liveness),
            stream_items(client, table),
        ):
            done["checked"] += 1
            if outcome is not None:
                done[outcome] += 1
    return done


def main(argv: list[str] | None = None) -> int:
    """Run the backfill against the table the settings name; prints what it did."""
    parser = argparse.ArgumentParser(
        prog="python -m streamlease.index_backfill",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.parse_args(argv)
    settings = Settings.from_env()
    client = aws.client("dynamodb", settings)
    done = backfill(client, settings.table_name, settings.liveness)
    print(
        f"{done['checked']} streams checked: {done['added']} entries added,"
        f" {done['removed']} removed, {done['rekeyed']} re-keyed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
