"""Presets: ``make deploy`` with no keys deploys the configuration the bill prices, each named
preset is one ``-c streamlease:preset=NAME``, and in every priced configuration the ``Headroom``
alarm is quiet when the fleet has settled for the streams it is sized for."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App
from template_support import TemplateJson, evaluate_alarm_expression, flat, resources_of

from cdk.app import PRESET_KEY, REPO_ROOT, build, config_from_context, context_key
from cdk.config import DeploymentConfig, min_max_tasks, settled_tasks, spare_at_rest_tasks
from cdk.presets import (
    DEFAULT_PRESET,
    PRESET_FIELDS,
    PRESETS,
    Preset,
    measured_sizing,
    sized_for,
)

CDK_CONTEXT: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


def test_cdk_json_deploys_the_default_preset_and_leaves_its_fields_to_it() -> None:
    """cdk.json names the preset and none of the fields a preset sets (a key of its own would
    override the preset, so `-c streamlease:preset=busy` would not change it)."""
    assert CDK_CONTEXT[PRESET_KEY] == DEFAULT_PRESET
    assert not {context_key(name) for name in PRESET_FIELDS} & CDK_CONTEXT.keys()


def test_every_preset_sets_every_preset_field() -> None:
    for preset in Preset:
        assert set(PRESETS[preset]) == set(PRESET_FIELDS), preset


@pytest.mark.parametrize("preset", list(Preset))
def test_every_preset_is_what_the_stored_measurement_sizes(preset: Preset) -> None:
    """Capacity, tasks and shards of each preset are the stored run's sizing
    (bench/results/capacity.json) by the rule: a new measurement that moves them fails here
    until the preset follows it."""
    assert dict(PRESETS[preset]) == sized_for(preset, measured_sizing())


def test_sizing_follows_the_rule() -> None:
    """1,000 streams: a capacity of 1,000 settles at two tasks with one spare; 800 needs three
    (two leave 600 spare, under one task); 250 needs five and target tracking settles at six."""

    def sizing(capacity: int) -> dict[str, Any]:
        return {
            "rates": {
                rate: {"capacity_per_worker": capacity, "sink_shards": 2} for rate in ("1", "10")
            }
        }

    assert {k: sized_for(Preset.LIGHT, sizing(1000))[k] for k in ("min_tasks", "max_tasks")} == {
        "min_tasks": 2,
        "max_tasks": 3,
    }
    light = sized_for(Preset.LIGHT, sizing(800))
    assert (light["min_tasks"], light["max_tasks"], light["sink_shards"]) == (3, 4, 2)
    busy = sized_for(Preset.BUSY, sizing(250))
    assert (busy["min_tasks"], busy["max_tasks"]) == (5, 7)


def test_the_config_without_keys_is_the_default_preset() -> None:
    """No context at all, cdk.json's context and DeploymentConfig() are the same configuration:
    what the bill calls the deployed default."""
    assert config_from_context({}) == config_from_context(CDK_CONTEXT) == DeploymentConfig()


def test_a_preset_sets_its_fields_and_a_key_of_its_own_overrides_it() -> None:
    busy = config_from_context({**CDK_CONTEXT, PRESET_KEY: "busy"})
    assert busy.capacity_per_worker == PRESETS[Preset.BUSY]["capacity_per_worker"]
    assert busy.sink_shards == PRESETS[Preset.BUSY]["sink_shards"]
    overridden = config_from_context(
        {**CDK_CONTEXT, PRESET_KEY: "busy", "streamlease:sinkShards": "6"}
    )
    assert overridden.sink_shards == 6
    assert overridden.capacity_per_worker == busy.capacity_per_worker


def test_an_unknown_preset_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="not a preset; known: light, busy"):
        config_from_context({PRESET_KEY: "huge"})


def test_config_refuses_a_fleet_that_settles_without_one_task_spare() -> None:
    """Two tasks of 850 for 1,000 streams leave 700 spare, under one task: the Headroom alarm
    would never clear, so the configuration is refused and the fix named."""
    with pytest.raises(ValueError, match="min_tasks must be at least 3: the fleet settles at 2"):
        config_from_context(
            {**CDK_CONTEXT, "streamlease:capacityPerWorker": 850, "streamlease:minTasks": 2}
        )


def test_the_headroom_rule() -> None:
    assert settled_tasks(1000, 1000, 0.7, 2) == 2  # 700 a task at target
    assert settled_tasks(1000, 250, 0.7, 2) == 6  # 175 a task at target
    assert spare_at_rest_tasks(1000, 1000) == 2
    assert spare_at_rest_tasks(1000, 850) == 3
    assert min_max_tasks(1000, 1000) == 3


# --- the Headroom alarm in every priced configuration ---------------------------------------


@pytest.fixture(scope="module")
def preset_templates(
    tmp_path_factory: pytest.TempPathFactory, stateless_json: TemplateJson
) -> dict[Preset, tuple[DeploymentConfig, TemplateJson]]:
    """Each preset's configuration and stateless template: the default preset's is the
    session's synth of cdk.json; every other preset is synthesized here (with cdk-nag)."""
    templates = {DEFAULT_PRESET: (config_from_context(CDK_CONTEXT), stateless_json)}
    for preset in Preset:
        if preset == DEFAULT_PRESET:
            continue
        directory = tmp_path_factory.mktemp(f"cdk-{preset}.out")
        context = {**CDK_CONTEXT, PRESET_KEY: str(preset)}
        app = App(context=context, outdir=str(directory))
        deployment = build(app)
        app.synth()
        template = json.loads((directory / deployment.stateless.template_file).read_text())
        templates[preset] = (config_from_context(context), template)
    return templates


def _headroom_expression(template: TemplateJson) -> str:
    (alarm,) = [
        a
        for a in resources_of(template, "AWS::CloudWatch::Alarm").values()
        if "spare capacity" in flat(a["Properties"].get("AlarmDescription", ""))
    ]
    (expression,) = [m["Expression"] for m in alarm["Properties"]["Metrics"] if "Expression" in m]
    return str(expression)


@pytest.mark.parametrize("preset", list(Preset))
def test_headroom_is_quiet_when_the_fleet_has_settled(
    preset: Preset, preset_templates: dict[Preset, tuple[DeploymentConfig, TemplateJson]]
) -> None:
    """At the expected streams the fleet settles at target tracking's task count (or the
    minimum); the synthesized Headroom expression is 0 there."""
    config, template = preset_templates[preset]
    values = {"tasks": config.settled_tasks, "wanted": config.expected_streams}
    assert evaluate_alarm_expression(_headroom_expression(template), values) == 0


def pages_after_one_task_lost(config: DeploymentConfig) -> float:
    """1.0 when the tasks left after losing one of the settled fleet hold the expected streams
    with less than one task's capacity spare: ``Headroom`` pages if the task is not replaced
    within its 10 minutes (ECS replaces it in one or two); 0.0 when it stays quiet.

    As sized from the stored run: light, three tasks of 650 settle for 1,000 streams, two left
    hold them with 300 spare (under a task of 650: it pages); busy, eight tasks of 200 settle,
    seven left hold 1,000 with 400 spare (quiet)."""
    spare = (config.settled_tasks - 1) * config.capacity_per_worker - config.expected_streams
    return 1.0 if spare < config.capacity_per_worker else 0.0


@pytest.mark.parametrize("preset", list(Preset))
def test_losing_one_task_pages_or_stays_quiet_as_each_preset_intends(
    preset: Preset, preset_templates: dict[Preset, tuple[DeploymentConfig, TemplateJson]]
) -> None:
    config, template = preset_templates[preset]
    values = {"tasks": config.settled_tasks - 1, "wanted": config.expected_streams}
    assert evaluate_alarm_expression(
        _headroom_expression(template), values
    ) == pages_after_one_task_lost(config)
    assert (config.settled_tasks - 1) * config.capacity_per_worker >= config.expected_streams
