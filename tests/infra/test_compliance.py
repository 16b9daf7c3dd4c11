"""Compliance: cdk-nag AwsSolutions finds nothing unacknowledged, and cfn-lint passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import Acknowledgment, App, Stack, Validations
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from template_support import Synthesized

from cdk.app import add_compliance_checks

# CloudFormation warnings that CDK's own output triggers and that say nothing about this app.
CFN_LINT_IGNORED = {
    # CDK adds an explicit DependsOn from a function to its role's default policy *and* role;
    # cfn-lint reports the role half as redundant with the GetAtt of the role's ARN.
    "W3005",
}


def test_the_app_synthesizes_with_the_aws_solutions_checks_attached(
    synthesized: Synthesized,
) -> None:
    """``build`` attaches AwsSolutions; the session synth would have raised on any finding."""
    assert isinstance(synthesized.deployment.checks, AwsSolutionsChecks)
    assert synthesized.assembly.get_stack_artifact(synthesized.deployment.stateless.artifact_id)


def test_the_checks_fail_synth_on_an_unacknowledged_finding() -> None:
    """A control: a queue without a dead-letter queue makes synth raise under the same checks."""
    app = App()
    sqs.Queue(
        Stack(app, "Control"),
        "Queue",
        enforce_ssl=True,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
    )
    add_compliance_checks(app)
    with pytest.raises(Exception, match="AwsSolutions-SQS3"):
        app.synth()


def test_an_acknowledgement_with_a_reason_clears_the_finding() -> None:
    """The same queue passes once the finding is acknowledged on it."""
    app = App()
    queue = sqs.Queue(
        Stack(app, "Control"),
        "Queue",
        enforce_ssl=True,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
    )
    Validations.of(queue).acknowledge(
        Acknowledgment(id="AwsSolutions-SQS3", reason="control queue of a compliance test")
    )
    add_compliance_checks(app)
    app.synth()


def test_every_acknowledgement_carries_a_specific_reason(synthesized: Synthesized) -> None:
    """Each AwsSolutions acknowledgement explains itself in at least a full sentence."""
    acknowledged: dict[str, str] = {}
    for stack in (synthesized.deployment.stateful, synthesized.deployment.stateless):
        metadata_file = synthesized.directory / f"{stack.artifact_id}.metadata.json"
        for path, entries in json.loads(metadata_file.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    for rule_id, reason in entry["data"].items():
                        if "AwsSolutions-" in rule_id:
                            acknowledged[f"{path} {rule_id}"] = reason
    assert acknowledged, "expected the app's acknowledgements in the assembly metadata"
    for where, reason in acknowledged.items():
        assert len(reason.split()) >= 12, f"{where}: reason too thin: {reason!r}"


def test_templates_pass_cfn_lint(synthesized: Synthesized) -> None:
    """cfn-lint finds no error and no warning (beyond the CDK artefacts listed above)."""
    templates = sorted(str(p) for p in synthesized.directory.glob("*.template.json"))
    assert len(templates) == 2
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("cfn-lint")),
            "--format",
            "parseable",
            "--ignore-checks",
            *sorted(CFN_LINT_IGNORED),
            "--",
            *templates,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
