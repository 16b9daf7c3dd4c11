"""The local moto server keeps no record of the model objects it makes: stock moto appends
every one to a list for its own dashboard, down to the copy of each item a query answers with,
so its memory grew with every request (about 5 MB a minute under a local stack of 45 streams).
``make bench``'s soak section measures the memory itself over an hour."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from local.moto_process import MotoProcess
from streamlease.settings import Settings


def tracked_instances(moto: MotoProcess) -> dict[str, int]:
    """What moto's own dashboard data lists: model class → instances recorded."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{moto.endpoint_url}/moto-api/data.json", timeout=10) as answer:
        data: dict[str, dict[str, list[Any]]] = json.loads(answer.read())
    return {
        f"{service}.{model}": len(instances)
        for service, models in data.items()
        for model, instances in models.items()
        if instances
    }


def test_items_written_and_answered_are_not_kept_beside_the_table(
    moto_server: MotoProcess, aws_settings: Settings, dynamodb: Any
) -> None:
    """Writes, queries and scans leave nothing recorded: the table holds the items, nothing
    else does."""
    table = aws_settings.table_name
    for n in range(20):
        dynamodb.put_item(TableName=table, Item={"Pk": {"S": f"CONN#s{n}"}})
    for _ in range(10):
        dynamodb.scan(TableName=table)
        dynamodb.get_item(TableName=table, Key={"Pk": {"S": "CONN#s1"}})
    assert tracked_instances(moto_server) == {}
