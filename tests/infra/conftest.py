"""Fixtures of the infrastructure tests: the app synthesized once per session.

- ``synthesized`` (session): the whole app built from ``cdk.json``'s context, with the cdk-nag
  AwsSolutions checks attached, synthesized into a temporary cloud assembly. A synth costs
  ~10–15 s and ~1 GiB, so every test shares this one.
- ``stateful`` / ``stateless`` (session): ``aws_cdk.assertions.Template`` of each stack.
- ``stateful_json`` / ``stateless_json`` (session): the same templates as plain dicts, for walks
  over many resources (each ``Template`` call crosses into Node and costs ~0.1–0.3 s).
- ``config``: the :class:`~cdk.config.DeploymentConfig` that synth used.
- ``small_stack`` (function): an empty stack in its own app (no cdk-nag), for testing one
  construct in a configuration the deployed app does not use (it synthesizes in well under 1 s).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template
from template_support import Synthesized

from cdk.app import REPO_ROOT, build, config_from_context
from cdk.config import DeploymentConfig

CDK_CONTEXT: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """One synth of the whole app for the session (see the module docstring)."""
    directory = tmp_path_factory.mktemp("cdk.out")
    app = App(context=CDK_CONTEXT, outdir=str(directory))
    deployment = build(app)
    # With the cdk-nag plugin attached, any unacknowledged finding makes synth raise here.
    assembly = app.synth()

    def template_json(stack: Stack) -> dict[str, Any]:
        return json.loads((directory / stack.template_file).read_text())

    stateful_json = template_json(deployment.stateful)
    stateless_json = template_json(deployment.stateless)
    return Synthesized(
        deployment=deployment,
        assembly=assembly,
        directory=directory,
        stateful=Template.from_json(stateful_json),
        stateless=Template.from_json(stateless_json),
        stateful_json=stateful_json,
        stateless_json=stateless_json,
    )


@pytest.fixture(scope="session")
def stateful(synthesized: Synthesized) -> Template:
    """The stateful stack's template."""
    return synthesized.stateful


@pytest.fixture(scope="session")
def stateless(synthesized: Synthesized) -> Template:
    """The stateless stack's template."""
    return synthesized.stateless


@pytest.fixture(scope="session")
def stateful_json(synthesized: Synthesized) -> dict[str, Any]:
    """The stateful stack's template as a dict."""
    return synthesized.stateful_json


@pytest.fixture(scope="session")
def stateless_json(synthesized: Synthesized) -> dict[str, Any]:
    """The stateless stack's template as a dict."""
    return synthesized.stateless_json


@pytest.fixture(scope="session")
def config() -> DeploymentConfig:
    """The configuration ``cdk.json`` gives (the one ``synthesized`` used)."""
    return config_from_context(CDK_CONTEXT)


@pytest.fixture
def small_stack() -> Stack:
    """An empty stack in an app with the project's feature flags and no cdk-nag."""
    flags = {k: v for k, v in CDK_CONTEXT.items() if k.startswith("@aws-cdk")}
    return Stack(App(context=flags), "Small")
