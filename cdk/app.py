"""Entry point of the CDK app: ``cdk synth`` / ``cdk deploy`` run ``python -m cdk.app``.

This is the only module that reads CDK context. Every choice is a context key
``streamlease:<fieldInCamelCase>`` of :class:`cdk.config.DeploymentConfig`, set in ``cdk.json`` or
on the command line (``cdk deploy -c streamlease:maxTasks=20``). Unknown ``streamlease:`` keys are
refused, so a misspelt choice cannot be silently ignored. ``streamlease:preset`` names a fleet
size of :mod:`cdk.presets` (``cdk.json`` names the deployed default); a key of its own overrides
what the preset says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, get_type_hints

from aws_cdk import App, Tags, Validations
from aws_cdk import aws_logs as logs
from cdk_nag import AwsSolutionsChecks

from cdk.config import CapacityRange, DeploymentConfig
from cdk.presets import DEFAULT_PRESET, PRESETS, Preset
from cdk.stacks.stateful import StatefulStack
from cdk.stacks.stateless import StatelessStack
from streamlease.settings import parse_value

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
LAMBDA_ASSET: Final = REPO_ROOT / "build" / "lambda.zip"
"""Built by ``make lambda`` (a dependency of ``make synth``, ``deploy`` and ``test``)."""
WORKER_DOCKERFILE: Final = "worker/Dockerfile"
"""Relative to the image build context, the repository root (filtered by ``.dockerignore``)."""
CONTEXT_PREFIX: Final = "streamlease:"
PRESET_KEY: Final = CONTEXT_PREFIX + "preset"

_RETENTION_DAYS: Final = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    731: logs.RetentionDays.TWO_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


@dataclass(frozen=True)
class Deployment:
    """The app, its two stacks and the compliance checks attached to it."""

    app: App
    stateful: StatefulStack
    stateless: StatelessStack
    checks: AwsSolutionsChecks


def context_key(field_name: str) -> str:
    """The context key of a config field: ``max_tasks`` → ``streamlease:maxTasks``."""
    head, *rest = field_name.split("_")
    return CONTEXT_PREFIX + head + "".join(part.capitalize() for part in rest)


def config_from_context(context: Mapping[str, Any]) -> DeploymentConfig:
    """Build the deployment configuration from CDK context values.

    Values may be JSON-typed (from ``cdk.json``) or strings (from ``-c key=value``). The preset
    (``streamlease:preset``, else :data:`~cdk.presets.DEFAULT_PRESET`) gives the fields it sets;
    keys of their own override them. Raises ``ValueError`` naming the key for an unknown key or
    preset, or a value that does not parse or breaks a rule of :class:`DeploymentConfig`.
    """
    hints = get_type_hints(DeploymentConfig)
    fields = {context_key(f.name): f.name for f in dataclasses.fields(DeploymentConfig)}
    unknown = sorted(
        k for k in context if k.startswith(CONTEXT_PREFIX) and k not in fields and k != PRESET_KEY
    )
    if unknown:
        raise ValueError(f"unknown context keys: {', '.join(unknown)}; known: {', '.join(fields)}")
    raw_preset = context.get(PRESET_KEY, DEFAULT_PRESET)
    try:
        preset = Preset(raw_preset)
    except ValueError:
        raise ValueError(
            f"context {PRESET_KEY}={raw_preset!r}: not a preset; known: {', '.join(Preset)}"
        ) from None
    raw = {context_key(name): value for name, value in PRESETS[preset].items()}
    raw |= {key: value for key, value in context.items() if key in fields}
    values: dict[str, Any] = {}
    for key, name in fields.items():
        if key in raw:
            try:
                values[name] = _parse(raw[key], hints[name])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"context {key}={raw[key]!r}: {exc}") from None
    return DeploymentConfig(**values)


def _parse(raw: Any, kind: Any) -> Any:
    """A context value as ``kind``: capacity ranges here, every other type as settings are read
    (:func:`streamlease.settings.parse_value`)."""
    if kind is CapacityRange:
        low, high = raw if isinstance(raw, list) else str(raw).split("-", 1)
        return CapacityRange(int(low), int(high))
    return parse_value(raw, kind)


def retention(days: int) -> logs.RetentionDays:
    """The CloudWatch Logs retention of ``days``. Raises ``ValueError`` for a value Logs lacks."""
    try:
        return _RETENTION_DAYS[days]
    except KeyError:
        raise ValueError(
            f"log retention of {days} days is not offered; use one of {sorted(_RETENTION_DAYS)}"
        ) from None


def add_compliance_checks(app: App) -> AwsSolutionsChecks:
    """Attach cdk-nag's AwsSolutions rules to ``app``: any unacknowledged finding fails synth.

    A finding is acknowledged with ``Validations.of(construct).acknowledge(...)`` on the
    construct it excuses, with the reason it is acceptable there.
    """
    checks = AwsSolutionsChecks(app)
    Validations.of(app).add_plugins(checks)
    return checks


def build(app: App) -> Deployment:
    """Add both stacks and the cdk-nag AwsSolutions checks to ``app``, configured from its context.

    Raises ``ValueError`` for invalid configuration and ``FileNotFoundError`` when the Lambda code
    asset has not been built (``make lambda``).
    """
    config = config_from_context(app.node.get_all_context())
    log_retention = retention(config.log_retention_days)
    if not LAMBDA_ASSET.is_file():
        raise FileNotFoundError(
            f"{LAMBDA_ASSET} is missing: run `make lambda` (make synth/deploy/test do it for you)"
        )
    stateful = StatefulStack(
        app,
        f"{config.stack_prefix}Stateful",
        config=config,
        description="streamlease state: lease table, command queues, sink stream (retained)",
    )
    stateless = StatelessStack(
        app,
        f"{config.stack_prefix}Stateless",
        config=config,
        table=stateful.table,
        queue=stateful.queue,
        dead_letter_queue=stateful.dead_letter_queue,
        sink_stream=stateful.sink_stream,
        watermarks=stateful.watermarks,
        lambda_asset=str(LAMBDA_ASSET),
        image_directory=str(REPO_ROOT),
        dockerfile=WORKER_DOCKERFILE,
        log_retention=log_retention,
        description="streamlease service: API, Lambdas, worker fleet, scaling, dashboard, alarms",
    )
    Tags.of(app).add("project", "streamlease")
    checks = add_compliance_checks(app)
    return Deployment(app=app, stateful=stateful, stateless=stateless, checks=checks)


def main() -> None:
    """Synthesize the app into the directory the CDK CLI asked for."""
    deployment = build(App())
    deployment.app.synth()


if __name__ == "__main__":
    main()
