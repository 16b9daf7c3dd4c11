"""Least privilege: every principal may call exactly the data actions its code calls (and, while
a table migrates, the worker what the previous release's workers call).

The lists below are the specification: what each principal's code calls on the lease table (on
items, and per index: every Query and Scan goes to one), on the command queue and on the sink
stream. A grant beyond them, or one missing, fails here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App
from template_support import TemplateJson, actions_of, flat, resources_in, statements_of

from cdk.app import REPO_ROOT, build

DATA_SERVICES = ("dynamodb", "sqs", "kinesis")
CDK_CONTEXT: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]

EXPECTED: dict[str, dict[str, set[str]]] = {
    "ApiFunctionRole": {
        "table": {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem"},
        "index/by-state": {"dynamodb:Query"},
        "index/fleet": {"dynamodb:Query"},
        "index/by-holder": {"dynamodb:Scan"},  # listings by connection state
        "queue": {"sqs:SendMessage"},
    },
    "ReaperFunctionRole": {
        "table": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
        "index/fleet": {"dynamodb:Query"},
        "index/by-holder": {"dynamodb:Query", "dynamodb:Scan"},
        "queue": {"sqs:SendMessage"},
        "reaper dead letters": {"sqs:SendMessage"},  # its failed runs (on-failure destination)
    },
    "AuditorFunctionRole": {
        "table": {"dynamodb:BatchGetItem"},
        "index/fleet": {"dynamodb:Query"},
        "index/by-holder": {"dynamodb:Scan"},
        "index/by-shard-expiry": {"dynamodb:Scan"},
    },
    "WorkersTaskDefinitionTaskRole": {
        "table": {
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",  # the live peers' load figures
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:DescribeTable",  # its warm write throughput paces handoffs
        },
        "index/fleet": {"dynamodb:Query"},
        "index/by-shard-expiry": {"dynamodb:Query", "dynamodb:Scan"},
        # own streams; streams of sessions that are gone
        "index/by-holder": {"dynamodb:Query", "dynamodb:Scan"},
        "queue": {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:SendMessage",
        },
        "sink": {"kinesis:PutRecords"},
    },
}


def _target(resource: Any) -> str:
    """Which data resource an ARN names: the table, one of its indexes, the command queue, the
    sink, the reaper's dead-letter queue."""
    text = flat(resource)
    if "LeaseTable" in text:
        for index in (
            "by-state-expiry",
            "by-shard-expiry",
            "by-state",
            "by-owner",
            "by-holder",
            "fleet",
        ):
            if text.endswith(f'"/index/{index}"]]}}'):
                return f"index/{index}"
        assert "/index/" not in text, f"an index grant that names no index: {text}"
        return "table"
    if "CommandQueue" in text and "DeadLetter" not in text:
        return "queue"
    if "SinkStream" in text:
        return "sink"
    if "ReaperDeadLetters" in text:
        return "reaper dead letters"
    return f"other: {text}"


def data_grants(template: TemplateJson, role_prefix: str) -> dict[str, set[str]]:
    """Resource (``table``, ``index/<name>``, ``queue``, ``sink``) → the data actions the role's
    policy allows there."""
    grants: dict[str, set[str]] = {}
    for statement in statements_of(template, role_prefix):
        actions = {a for a in actions_of(statement) if a.split(":")[0] in DATA_SERVICES}
        if not actions:
            continue
        assert statement["Effect"] == "Allow"
        for resource in resources_in(statement):
            grants.setdefault(_target(resource), set()).update(actions)
    return grants


@pytest.mark.parametrize("role", sorted(EXPECTED))
def test_each_principal_may_call_exactly_the_data_actions_it_uses(
    stateless_json: TemplateJson, role: str
) -> None:
    """API, reaper, auditor and worker: no action they do not call, none missing, and each
    on the one resource it calls it on (no ``index/*``)."""
    assert data_grants(stateless_json, role) == EXPECTED[role]


def test_no_principal_may_scan_or_write_in_batches_the_code_never_does(
    stateless_json: TemplateJson,
) -> None:
    """The broad helpers' extras (BatchWriteItem, PutItem outside the worker's session create,
    table scans, stream reads) are granted to nobody."""
    for role in EXPECTED:
        actions = set().union(*data_grants(stateless_json, role).values())
        assert "dynamodb:BatchWriteItem" not in actions, role
        assert not {a for a in actions if a.startswith("dynamodb:") and "Stream" in a}, role
        assert "dynamodb:PutItem" not in actions or role.startswith("Workers"), role


@pytest.fixture(scope="module")
def migrating(tmp_path_factory: pytest.TempPathFactory) -> TemplateJson:
    """The stateless template at the migration stage where this release rolls out."""
    directory = tmp_path_factory.mktemp("cdk-migrating.out")
    app = App(
        context={**CDK_CONTEXT, "streamlease:tableIndexes": "holder-added"}, outdir=str(directory)
    )
    deployment = build(app)
    app.synth()
    template: TemplateJson = json.loads(
        (directory / deployment.stateless.template_file).read_text()
    )
    return template


def test_while_this_release_rolls_out_the_workers_keep_the_previous_ones_grants(
    migrating: TemplateJson,
) -> None:
    """Old workers still running query by-state-expiry and by-owner until they are replaced;
    at every other stage the worker role has exactly its own (above)."""
    grants = data_grants(migrating, "WorkersTaskDefinitionTaskRole")
    expected = dict(EXPECTED["WorkersTaskDefinitionTaskRole"])
    expected["index/by-state-expiry"] = {"dynamodb:Query"}
    expected["index/by-owner"] = {"dynamodb:Query"}
    assert grants == expected


@pytest.mark.parametrize(
    ("policy", "actions"),
    [
        ("ApiSecretLookup", {"secretsmanager:DescribeSecret"}),
        ("WorkersStreamSecrets", {"secretsmanager:GetSecretValue"}),
    ],
)
def test_secrets_are_described_by_the_api_and_read_only_by_the_workers(
    stateless_json: TemplateJson, policy: str, actions: set[str]
) -> None:
    """The API checks that a profile's secrets exist, never reads one; both only under the
    deployment's prefix."""
    statements = statements_of(stateless_json, policy)
    assert [actions_of(s) for s in statements] == [actions]
    prefix = CDK_CONTEXT["streamlease:secretsPrefix"]
    (resource,) = resources_in(statements[0])
    assert flat(resource).endswith(f':secret:{prefix}*"]]}}')
