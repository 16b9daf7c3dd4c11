"""The stateful stack: the lease table, the command queues and the sink stream."""

from __future__ import annotations

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Match, Template
from template_support import TemplateJson, lease_table_properties, properties_of, resources_of

from cdk.components.lease_table import LeaseTable
from cdk.config import BillingMode, CapacityRange, DeploymentConfig, TableIndexes
from streamlease.indexes import (
    BY_OWNER,
    BY_SHARD_EXPIRY,
    BY_STATE,
    BY_STATE_EXPIRY,
    INDEXES,
    KEY_ATTRIBUTE_TYPES,
    LEGACY_BY_OWNER,
    MIGRATION_STAGES,
    create_table_kwargs,
)
from streamlease.schema import PK, StreamAttr

# Written out here, not imported: a change to a stateful logical id replaces the resource in
# CloudFormation (a new, empty table), so it must fail this test before it reaches a deploy.
PINNED = {
    "LeaseTable": "AWS::DynamoDB::GlobalTable",
    "CommandQueue": "AWS::SQS::Queue",
    "CommandDeadLetterQueue": "AWS::SQS::Queue",
    "SinkStream": "AWS::Kinesis::Stream",
}


def test_stateful_logical_ids_are_pinned(stateful_json: TemplateJson) -> None:
    """Each stateful resource keeps its logical id, and there are no other stateful resources."""
    resources = stateful_json["Resources"]
    for logical_id, resource_type in PINNED.items():
        assert resources.get(logical_id, {}).get("Type") == resource_type, logical_id
    stateful_types = set(PINNED.values())
    unpinned = {
        logical_id
        for logical_id, body in resources.items()
        if body["Type"] in stateful_types and logical_id not in PINNED
    }
    assert unpinned == set()


def test_every_stateful_resource_is_retained(stateful_json: TemplateJson) -> None:
    """Deleting the stack (or replacing a resource) keeps the table, both queues and the stream."""
    resources = stateful_json["Resources"]
    for logical_id in PINNED:
        assert resources[logical_id]["DeletionPolicy"] == "Retain", logical_id
        assert resources[logical_id]["UpdateReplacePolicy"] == "Retain", logical_id


def test_table_key_is_the_seed_partition_key(stateful_json: TemplateJson) -> None:
    """The table is keyed by ``Pk`` (string) alone, as the seed's schema."""
    table = properties_of(stateful_json, "AWS::DynamoDB::GlobalTable")
    assert table["KeySchema"] == [{"AttributeName": PK, "KeyType": "HASH"}]


def test_table_has_every_schema_index_with_its_keys_and_projection(
    stateful_json: TemplateJson,
) -> None:
    """One GSI per ``indexes.INDEXES`` entry: same name, keys and projected attributes."""
    table = properties_of(stateful_json, "AWS::DynamoDB::GlobalTable")
    by_name = {gsi["IndexName"]: gsi for gsi in table["GlobalSecondaryIndexes"]}
    assert set(by_name) == {index.name for index in INDEXES}
    for index in INDEXES:
        expected_keys = [{"AttributeName": index.partition_key, "KeyType": "HASH"}]
        if index.sort_key:
            expected_keys.append({"AttributeName": index.sort_key, "KeyType": "RANGE"})
        assert by_name[index.name]["KeySchema"] == expected_keys, index.name
        projection = by_name[index.name]["Projection"]
        if index.projected:
            assert projection["ProjectionType"] == "INCLUDE"
            assert sorted(projection["NonKeyAttributes"]) == sorted(index.projected)
        else:
            assert projection == {"ProjectionType": "KEYS_ONLY"}, index.name


def test_deployed_indexes_match_the_local_table(stateful_json: TemplateJson) -> None:
    """The CDK table and the local stack's CreateTable agree on every index's keys and
    projection, so what works on moto works on AWS (the fleet query reads its projected fields)."""
    table = properties_of(stateful_json, "AWS::DynamoDB::GlobalTable")
    deployed = {
        gsi["IndexName"]: (gsi["KeySchema"], gsi["Projection"])
        for gsi in table["GlobalSecondaryIndexes"]
    }
    local = {
        gsi["IndexName"]: (gsi["KeySchema"], gsi["Projection"])
        for gsi in create_table_kwargs("t")["GlobalSecondaryIndexes"]
    }
    assert deployed == local


def test_listing_index_is_keys_only_on_state_and_stream_id(stateful_json: TemplateJson) -> None:
    """by-state: partition desired_state, sort stream_id, keys only (GET /streams pages it)."""
    table = properties_of(stateful_json, "AWS::DynamoDB::GlobalTable")
    by_name = {gsi["IndexName"]: gsi for gsi in table["GlobalSecondaryIndexes"]}
    assert by_name[BY_STATE.name]["KeySchema"] == [
        {"AttributeName": StreamAttr.DESIRED_STATE, "KeyType": "HASH"},
        {"AttributeName": StreamAttr.STREAM_ID, "KeyType": "RANGE"},
    ]
    assert by_name[BY_STATE.name]["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_table_attribute_types_come_from_the_schema(stateful_json: TemplateJson) -> None:
    """Every key attribute is defined with the type ``indexes.KEY_ATTRIBUTE_TYPES`` gives it."""
    table = properties_of(stateful_json, "AWS::DynamoDB::GlobalTable")
    defined = {d["AttributeName"]: d["AttributeType"] for d in table["AttributeDefinitions"]}
    assert defined == KEY_ATTRIBUTE_TYPES


def test_table_has_point_in_time_recovery_and_deletion_protection(stateful: Template) -> None:
    """PITR is on and the table cannot be deleted by accident."""
    stateful.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "Replicas": [
                Match.object_like(
                    {
                        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                        "DeletionProtectionEnabled": True,
                    }
                )
            ]
        },
    )


def test_table_is_on_demand_by_default(stateful: Template) -> None:
    """The default billing mode is pay per request."""
    stateful.has_resource_properties(
        "AWS::DynamoDB::GlobalTable", {"BillingMode": "PAY_PER_REQUEST"}
    )


def test_provisioned_billing_autoscales_reads_and_writes(small_stack: Stack) -> None:
    """The provisioned option scales read and write capacity between the configured bounds."""
    LeaseTable(
        small_stack,
        "Leases",
        billing=BillingMode.PROVISIONED,
        provisioned_read=CapacityRange(3, 30),
        provisioned_write=CapacityRange(4, 40),
    )
    table = properties_of(Template.from_stack(small_stack).to_json(), "AWS::DynamoDB::GlobalTable")
    assert table["BillingMode"] == "PROVISIONED"
    write = table["WriteProvisionedThroughputSettings"]["WriteCapacityAutoScalingSettings"]
    assert (write["MinCapacity"], write["MaxCapacity"]) == (4, 40)
    read = table["Replicas"][0]["ReadProvisionedThroughputSettings"]
    assert (
        read["ReadCapacityAutoScalingSettings"]["MinCapacity"],
        read["ReadCapacityAutoScalingSettings"]["MaxCapacity"],
    ) == (3, 30)


def test_command_queue_moves_poison_messages_to_the_dead_letter_queue(
    stateful_json: TemplateJson,
) -> None:
    """After ``command_max_receives`` receives a command goes to the DLQ."""
    queue = stateful_json["Resources"]["CommandQueue"]["Properties"]
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["CommandDeadLetterQueue", "Arn"]},
        "maxReceiveCount": 5,
    }


def test_queues_are_encrypted_and_refuse_plain_http(stateful_json: TemplateJson) -> None:
    """Both queues use SSE and their policies deny any request without TLS."""
    resources = stateful_json["Resources"]
    for logical_id in ("CommandQueue", "CommandDeadLetterQueue"):
        assert resources[logical_id]["Properties"]["SqsManagedSseEnabled"] is True
    denied = set()
    for policy in resources_of(stateful_json, "AWS::SQS::QueuePolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement["Condition"] == {
                "Bool": {"aws:SecureTransport": "false"}
            }:
                denied.update(queue["Ref"] for queue in policy["Properties"]["Queues"])
    assert denied == {"CommandQueue", "CommandDeadLetterQueue"}


def test_sink_stream_is_provisioned_and_encrypted(stateful_json: TemplateJson) -> None:
    """The Kinesis stream has the default preset's shards (steady traffic: far cheaper than on
    demand) and is encrypted with the AWS key."""
    stream = properties_of(stateful_json, "AWS::Kinesis::Stream")
    assert stream["StreamModeDetails"] == {"StreamMode": "PROVISIONED"}
    assert stream["ShardCount"] == DeploymentConfig().sink_shards
    assert stream["StreamEncryption"] == {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"}
    assert "Name" not in stream


def test_outputs_name_what_a_worker_outside_the_fleet_needs(stateful_json: TemplateJson) -> None:
    """The `docker run` recipe of docs/deploying.md reads the table, the command queue and the
    sink here."""
    outputs = stateful_json["Outputs"]
    assert outputs["TableName"]["Value"] == {"Ref": "LeaseTable"}
    assert outputs["CommandQueueUrl"]["Value"] == {"Ref": "CommandQueue"}
    assert outputs["SinkStreamName"]["Value"] == {"Ref": "SinkStream"}


@pytest.mark.parametrize(
    "stage", [t for t in TableIndexes if t is not TableIndexes.CURRENT], ids=str
)
def test_each_migration_stage_deploys_its_indexes(small_stack: Stack, stage: TableIndexes) -> None:
    """streamlease:tableIndexes names a stage of a deployed table's move: the table has
    exactly that stage's indexes (one index more or less than the stage before)."""
    props = lease_table_properties(small_stack, stage)
    names = {gsi["IndexName"] for gsi in props["GlobalSecondaryIndexes"]}
    assert stage.stage is not None
    assert names == {index.name for index in MIGRATION_STAGES[stage.stage]}
    defined = {d["AttributeName"] for d in props["AttributeDefinitions"]}
    used = {
        k for index in MIGRATION_STAGES[stage.stage] for k in (index.partition_key, index.sort_key)
    }
    assert defined == (used - {None}) | {PK}


def test_the_current_layout_has_no_old_orphan_index(stateful_json: TemplateJson) -> None:
    """What cdk.json deploys: by-shard-expiry and by-holder; by-state-expiry and by-owner
    gone."""
    table = properties_of(stateful_json, "AWS::DynamoDB::GlobalTable")
    names = {gsi["IndexName"] for gsi in table["GlobalSecondaryIndexes"]}
    assert {BY_SHARD_EXPIRY.name, BY_OWNER.name} <= names
    assert not names & {BY_STATE_EXPIRY.name, LEGACY_BY_OWNER.name}
