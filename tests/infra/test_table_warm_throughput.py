"""Pre-warming the lease table (``streamlease:tableWarmWriteUnits``): absent or 0, the table and
its indexes carry no warm throughput (DynamoDB's default); set, the table and every index are
warmed to that many write units a second; a value DynamoDB would refuse stops synth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template
from template_support import TemplateJson, properties_of

from cdk.app import config_from_context
from cdk.config import DeploymentConfig
from cdk.stacks.stateful import StatefulStack
from streamlease.indexes import INDEXES

KEY = "streamlease:tableWarmWriteUnits"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _stateful_table(flags: dict[str, Any], config: DeploymentConfig) -> dict[str, Any]:
    """The lease table's properties in a stateful stack built from ``config`` alone."""
    stack = StatefulStack(App(context=flags), "Stateful", config=config)
    return properties_of(Template.from_stack(stack).to_json(), "AWS::DynamoDB::GlobalTable")


@pytest.fixture
def flags() -> dict[str, Any]:
    """cdk.json's feature flags (read here: ``conftest`` names one module per test folder, and
    which one an import by that name finds depends on what ran before)."""
    context = json.loads((REPO_ROOT / "cdk.json").read_text(encoding="utf-8"))["context"]
    return {k: v for k, v in context.items() if k.startswith("@aws-cdk")}


def test_the_deployed_default_does_not_pre_warm(stateful_json: TemplateJson) -> None:
    """cdk.json's 0: no WarmThroughput anywhere, so DynamoDB's default (and no charge)."""
    table = properties_of(stateful_json, "AWS::DynamoDB::GlobalTable")
    assert "WarmThroughput" not in table
    assert not [gsi for gsi in table["GlobalSecondaryIndexes"] if "WarmThroughput" in gsi]


def test_a_set_value_warms_the_table_and_every_index(flags: dict[str, Any]) -> None:
    config = config_from_context({KEY: "12000"})
    assert config.table_warm_write_units == 12000
    table = _stateful_table(flags, config)
    assert table["WarmThroughput"] == {"WriteUnitsPerSecond": 12000}
    warmed = {
        gsi["IndexName"]: gsi.get("WarmThroughput") for gsi in table["GlobalSecondaryIndexes"]
    }
    assert warmed == {index.name: {"WriteUnitsPerSecond": 12000} for index in INDEXES}


def test_absent_means_no_pre_warming(flags: dict[str, Any]) -> None:
    table = _stateful_table(flags, config_from_context({}))
    assert "WarmThroughput" not in table
    assert not [gsi for gsi in table["GlobalSecondaryIndexes"] if "WarmThroughput" in gsi]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", KEY),
        (4000.5, KEY),
        (3999, "at least 4000 write units a second"),
        (-1, "at least 4000 write units a second"),
    ],
)
def test_a_value_dynamodb_would_refuse_stops_synth(value: Any, message: str) -> None:
    """Not a whole number, or below a new on-demand table's 4,000."""
    with pytest.raises(ValueError, match=message):
        config_from_context({KEY: value})
