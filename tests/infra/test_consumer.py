"""The optional consumer (``streamlease:consumer``): absent by default; on, a function on the
sink stream that keeps each shard's order, isolates a bad record and never drops one, its
watermark table, least-privilege grants and alarms, all clean under cdk-nag."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App
from template_support import TemplateJson, flat, resources_of, statements_of

from cdk.app import REPO_ROOT, build
from cdk.components.stream_consumer import HANDLER, RETRY_ATTEMPTS
from streamlease.schema import WATERMARK_PK
from streamlease.settings import env_name

CDK_CONTEXT: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
ON = {**CDK_CONTEXT, "streamlease:consumer": True, "streamlease:consumerBatchingWindowSeconds": 7}


@pytest.fixture(scope="module")
def consumer_on(tmp_path_factory: pytest.TempPathFactory) -> tuple[TemplateJson, TemplateJson]:
    """Both templates of the app with the consumer on (cdk-nag attached: a finding raises)."""
    directory = tmp_path_factory.mktemp("cdk.out.consumer")
    app = App(context=ON, outdir=str(directory))
    deployment = build(app)
    app.synth()

    def template(stack: Any) -> TemplateJson:
        return dict(json.loads((directory / stack.template_file).read_text()))

    return template(deployment.stateful), template(deployment.stateless)


def consumer_function(stateless: TemplateJson) -> tuple[str, dict[str, Any]]:
    found = {
        logical_id: body
        for logical_id, body in resources_of(stateless, "AWS::Lambda::Function").items()
        if body["Properties"]["Handler"] == HANDLER
    }
    assert len(found) == 1
    return next(iter(found.items()))


def test_off_by_default_nothing_of_it_is_deployed(
    stateful_json: TemplateJson, stateless_json: TemplateJson
) -> None:
    assert CDK_CONTEXT["streamlease:consumer"] is False
    assert "WatermarkTable" not in stateful_json["Resources"]
    handlers = [
        body["Properties"]["Handler"]
        for body in resources_of(stateless_json, "AWS::Lambda::Function").values()
    ]
    assert HANDLER not in handlers
    assert not resources_of(stateless_json, "AWS::Lambda::EventSourceMapping")


def test_the_event_source_keeps_order_isolates_bad_records_and_sends_them_on(
    consumer_on: tuple[TemplateJson, TemplateJson],
) -> None:
    """One batch per shard at a time; partial failures reported; bisect on error; bounded
    retries, then the batch's description to the on-failure queue; the window asked for."""
    _, stateless = consumer_on
    (mapping,) = resources_of(stateless, "AWS::Lambda::EventSourceMapping").values()
    props = mapping["Properties"]
    assert props["ParallelizationFactor"] == 1
    assert props["BisectBatchOnFunctionError"] is True
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["MaximumRetryAttempts"] == RETRY_ATTEMPTS
    assert props["MaximumBatchingWindowInSeconds"] == 7
    assert props["StartingPosition"] == "TRIM_HORIZON"
    assert "SinkStream" in flat(props["EventSourceArn"])
    destination = flat(props["DestinationConfig"]["OnFailure"]["Destination"])
    assert "ConsumerFailedBatches" in destination
    function_id, _ = consumer_function(stateless)
    assert function_id in flat(props["FunctionName"])


def test_the_function_runs_the_shared_asset_and_names_its_table(
    consumer_on: tuple[TemplateJson, TemplateJson],
) -> None:
    _, stateless = consumer_on
    _, function = consumer_function(stateless)
    variables = function["Properties"]["Environment"]["Variables"]
    assert "WatermarkTable" in flat(variables[env_name("watermark_table_name")])
    assert function["Properties"]["Runtime"] == "python3.12"


def test_the_watermark_table_is_keyed_as_the_library_reads_it_and_kept(
    consumer_on: tuple[TemplateJson, TemplateJson],
) -> None:
    stateful, _ = consumer_on
    table = stateful["Resources"]["WatermarkTable"]
    props = table["Properties"]
    assert props["KeySchema"] == [{"AttributeName": WATERMARK_PK, "KeyType": "HASH"}]
    assert table["DeletionPolicy"] == "Retain"
    assert props["Replicas"][0]["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": True
    }
    assert props["Replicas"][0]["DeletionProtectionEnabled"] is True
    assert "SSESpecification" not in props  # AWS owned key, as the lease table


def test_the_function_may_read_and_write_only_its_watermarks(
    consumer_on: tuple[TemplateJson, TemplateJson],
) -> None:
    """DynamoDB: get and put on the watermark table alone; Kinesis: reads of the sink
    (the event source's grant); SQS: sends to its own on-failure queue."""
    _, stateless = consumer_on
    dynamodb: set[str] = set()
    for statement in statements_of(stateless, "ConsumerFunctionRole"):
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        text = flat(statement["Resource"])
        for action in actions:
            if action.startswith("dynamodb:"):
                assert "WatermarkTable" in text and "LeaseTable" not in text
                dynamodb.add(action)
            elif action.startswith("sqs:"):
                assert "ConsumerFailedBatches" in text
            elif action.startswith("kinesis:"):
                assert "SinkStream" in text
                assert action != "kinesis:PutRecords"
    assert dynamodb == {"dynamodb:GetItem", "dynamodb:PutItem"}


def test_the_failed_batches_and_a_lagging_consumer_are_alarmed(
    consumer_on: tuple[TemplateJson, TemplateJson],
) -> None:
    _, stateless = consumer_on
    alarms = {
        logical_id: body["Properties"]
        for logical_id, body in resources_of(stateless, "AWS::CloudWatch::Alarm").items()
    }
    failed = next(p for i, p in alarms.items() if "ConsumerFailedBatches" in i)
    assert "ConsumerFailedBatches" in flat(failed["Dimensions"])
    age = next(p for i, p in alarms.items() if "ConsumerIteratorAge" in i)
    assert age["MetricName"] == "IteratorAge"
    assert age["AlarmActions"] and failed["AlarmActions"]
