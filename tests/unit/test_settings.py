"""Settings (streamlease.settings): environment names, parsing, rules, rendering for another
process (to_env, settings_environment) and the round trip."""

from __future__ import annotations

import dataclasses

import pytest

from streamlease.errors import ConfigError
from streamlease.schema import Liveness
from streamlease.settings import ENV_PREFIX, Settings, env_name, parse_value, settings_environment


def test_defaults_are_a_valid_configuration():
    """Settings() with no input is usable, and keeps the 4:1 lease to heartbeat ratio."""
    settings = Settings()
    assert settings.lease_seconds == 4 * settings.heartbeat_seconds
    assert settings.lease_ms == 20_000
    assert settings.clock_skew_ms == 1_000


def test_env_names_are_the_prefix_plus_the_upper_case_field():
    """lease_seconds is set by STREAMLEASE_LEASE_SECONDS."""
    assert env_name("lease_seconds") == "STREAMLEASE_LEASE_SECONDS"
    assert env_name("allowed_hosts") == ENV_PREFIX + "ALLOWED_HOSTS"


def test_env_name_of_an_unknown_setting_is_a_key_error():
    """A misspelt setting name fails loudly instead of naming a variable nobody reads."""
    with pytest.raises(KeyError):
        env_name("lease_secs")


def test_an_empty_environment_gives_the_defaults():
    """Nothing set: every field keeps its default."""
    assert Settings.from_env({}) == Settings()


def test_numbers_strings_and_tuples_are_parsed_from_the_environment():
    """Each variable is parsed to its field's type, whitespace ignored."""
    settings = Settings.from_env(
        {
            "STREAMLEASE_LEASE_SECONDS": " 8 ",
            "STREAMLEASE_HEARTBEAT_SECONDS": "2.5",
            "STREAMLEASE_CAPACITY": "7",
            "STREAMLEASE_TABLE_NAME": "leases-prod",
            "STREAMLEASE_ALLOWED_HOSTS": " feed.example.com , *.example.org ,,",
        }
    )
    assert settings.lease_seconds == 8.0
    assert settings.heartbeat_seconds == 2.5
    assert settings.capacity == 7
    assert settings.table_name == "leases-prod"
    assert settings.allowed_hosts == ("feed.example.com", "*.example.org")


def test_an_empty_tuple_variable_is_an_empty_tuple():
    """An allow-list set to "" allows nothing in particular: ()."""
    assert Settings.from_env({"STREAMLEASE_ALLOWED_HOSTS": ""}).allowed_hosts == ()


@pytest.mark.parametrize("text", ["1", "true", "TRUE", "Yes", "on", " true "])
def test_true_spellings(text):
    """Booleans accept the usual spellings of true, case-insensitively."""
    assert Settings.from_env({"STREAMLEASE_ALLOW_INSECURE_WS": text}).allow_insecure_ws is True


@pytest.mark.parametrize("text", ["0", "false", "False", "no", "OFF", ""])
def test_false_spellings(text):
    """Booleans accept the usual spellings of false, and empty."""
    settings = Settings.from_env({"STREAMLEASE_HANDOFF_ON_RELEASE": text})
    assert settings.handoff_on_release is False


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("STREAMLEASE_LEASE_SECONDS", "twenty"),
        ("STREAMLEASE_LEASE_SECONDS", "nan"),
        ("STREAMLEASE_LEASE_SECONDS", "inf"),
        ("STREAMLEASE_LEASE_SECONDS", ""),
        ("STREAMLEASE_CAPACITY", "1.5"),
        ("STREAMLEASE_CAPACITY", "ten"),
        ("STREAMLEASE_ALLOW_INSECURE_WS", "maybe"),
        ("STREAMLEASE_ALLOW_INSECURE_WS", "2"),
    ],
)
def test_a_value_that_does_not_parse_names_its_variable(variable, value):
    """ConfigError says which variable is wrong and what it held."""
    with pytest.raises(ConfigError) as error:
        Settings.from_env({variable: value})
    assert variable in str(error.value)
    assert repr(value) in str(error.value)


@pytest.mark.parametrize(
    ("environ", "field"),
    [
        ({"STREAMLEASE_LEASE_SECONDS": "0"}, "lease_seconds"),
        ({"STREAMLEASE_HEARTBEAT_SECONDS": "-1"}, "heartbeat_seconds"),
        ({"STREAMLEASE_HEARTBEAT_SECONDS": "20"}, "heartbeat_seconds"),
        ({"STREAMLEASE_FENCE_MARGIN_SECONDS": "20"}, "fence_margin_seconds"),
        ({"STREAMLEASE_CLOCK_SKEW_SECONDS": "-0.5"}, "clock_skew_seconds"),
        ({"STREAMLEASE_CAPACITY": "0"}, "capacity"),
        ({"STREAMLEASE_SHED_BATCH": "0"}, "shed_batch"),
        ({"STREAMLEASE_MAX_URL_LENGTH": "4096"}, "max_url_length"),  # past the API document's
        ({"STREAMLEASE_PAGE_SIZE_MAX": "0"}, "page_size_max"),
        ({"STREAMLEASE_PAGE_SIZE_MAX": "101"}, "page_size_max"),  # past the API document's
    ],
)
def test_a_value_that_breaks_a_rule_names_the_setting(environ, field):
    """Values that parse but make no sense are refused, naming the variable that sets them."""
    with pytest.raises(ConfigError, match=env_name(field)):
        Settings.from_env(environ)


def test_a_heartbeat_that_cannot_beat_the_fence_is_refused():
    """A holder must renew before its own fencing deadline: heartbeat < lease - margin."""
    with pytest.raises(ConfigError, match="fences itself before it renews"):
        Settings(lease_seconds=1.0, heartbeat_seconds=0.8, fence_margin_seconds=0.3)


def test_the_kinesis_sink_timeout_defaults_to_half_the_fence_margin():
    """A call the last fence check let start ends within about twice its timeout: inside the
    margin by default, whatever the margin is scaled to."""
    assert Settings().sink_call_timeout_seconds == 1.0
    scaled = Settings(lease_seconds=2.0, heartbeat_seconds=0.5, fence_margin_seconds=0.2)
    assert scaled.sink_call_timeout_seconds == pytest.approx(0.1)
    assert Settings(sink_timeout_seconds=0.5).sink_call_timeout_seconds == 0.5


@pytest.mark.parametrize(
    "values",
    [
        {"sink": "kinesis", "sink_timeout_seconds": 1.5},
        {"sink": "kinesis", "fence_margin_seconds": 0.0},
    ],
)
def test_a_kinesis_timeout_the_fence_margin_cannot_cover_is_refused(values):
    """Twice the timeout above the margin: a send started just before the deadline could still
    be under way when the next holder writes. Said in the settings' own words."""
    with pytest.raises(ConfigError, match="at most half of STREAMLEASE_FENCE_MARGIN_SECONDS"):
        Settings(**values)


def test_other_sinks_do_not_use_the_kinesis_timeout():
    assert Settings(sink="file", sink_timeout_seconds=5.0).sink_call_timeout_seconds == 5.0


def test_every_broken_rule_is_reported_at_once():
    """An operator fixes all problems in one go, not one per restart."""
    with pytest.raises(ConfigError) as error:
        Settings(capacity=0, shed_batch=0)
    assert "STREAMLEASE_CAPACITY" in str(error.value)
    assert "STREAMLEASE_SHED_BATCH" in str(error.value)


def test_overrides_win_over_the_environment():
    """from_env(**overrides): explicit values beat variables."""
    settings = Settings.from_env({"STREAMLEASE_CAPACITY": "7"}, capacity=9)
    assert settings.capacity == 9


def test_the_process_environment_is_read_when_none_is_given(monkeypatch):
    """from_env() with no mapping reads os.environ."""
    monkeypatch.setenv("STREAMLEASE_LOCAL_WORKERS", "5")
    assert Settings.from_env().local_workers == 5


def test_ecs_metadata_is_read_from_the_variable_ecs_sets():
    """Some settings come from variables AWS sets, under AWS's name."""
    settings = Settings.from_env({"ECS_CONTAINER_METADATA_URI_V4": "http://169.254.170.2/v4/x"})
    assert settings.ecs_container_metadata_uri_v4 == "http://169.254.170.2/v4/x"
    assert "ECS_CONTAINER_METADATA_URI_V4" in settings.to_env()


def test_unrelated_variables_are_ignored():
    """Only variables with the project prefix (and the named exceptions) are read."""
    assert Settings.from_env({"LEASE_SECONDS": "1", "STREAMLEASE_UNKNOWN": "x"}) == Settings()


def test_default_settings_survive_to_env_and_back():
    """A child process given to_env() reads back the same settings."""
    settings = Settings()
    assert Settings.from_env(settings.to_env()) == settings


def test_customised_settings_survive_to_env_and_back():
    """Floats, ints, bools, tuples and strings all round-trip exactly."""
    settings = Settings(
        lease_seconds=0.4,
        heartbeat_seconds=0.1,
        fence_margin_seconds=0.05,
        clock_skew_seconds=0.0,
        capacity=3,
        allow_insecure_ws=True,
        handoff_on_release=False,
        allowed_hosts=("127.0.0.1", "*.example.com"),
        aws_endpoint_url="http://127.0.0.1:5000",
        worker_id="w-1",
    )
    assert Settings.from_env(settings.to_env()) == settings


def test_to_env_applies_overrides_and_names_every_field():
    """to_env(**overrides) writes one variable per field, overrides included."""
    env = Settings().to_env(worker_id="w-9", local_workers=1)
    assert env["STREAMLEASE_WORKER_ID"] == "w-9"
    assert env["STREAMLEASE_LOCAL_WORKERS"] == "1"
    assert len(env) == len(dataclasses.fields(Settings))
    assert all(isinstance(value, str) for value in env.values())


def test_to_env_validates_its_overrides():
    """A child is never handed settings that would fail at its start-up."""
    with pytest.raises(ConfigError):
        Settings().to_env(heartbeat_seconds=30.0)


def test_settings_environment_renders_values_as_settings_parses_them() -> None:
    """Booleans, numbers and host lists become the strings ``Settings.from_env`` reads back."""
    env = settings_environment(
        {"allow_insecure_ws": False, "capacity": 40, "allowed_hosts": ("a.example", "b.example")}
    )
    assert env == {
        env_name("allow_insecure_ws"): "false",
        env_name("capacity"): "40",
        env_name("allowed_hosts"): "a.example,b.example",
    }
    parsed = Settings.from_env(env)
    assert (parsed.allow_insecure_ws, parsed.capacity) == (False, 40)
    assert parsed.allowed_hosts == ("a.example", "b.example")


def test_settings_environment_refuses_an_unknown_setting() -> None:
    """A name that is not a Settings field fails instead of setting a dead variable."""
    with pytest.raises(KeyError):
        settings_environment({"lease_secs": 3})


def test_a_setting_read_from_an_aws_variable_is_written_under_that_name() -> None:
    """env_name, to_env and from_env agree on the one variable that is not prefixed."""
    assert env_name("ecs_container_metadata_uri_v4") == "ECS_CONTAINER_METADATA_URI_V4"


@pytest.mark.parametrize(
    ("raw", "kind", "expected"),
    [
        (True, bool, True),
        (20, int, 20),
        (20.0, int, 20),
        (20, float, 20.0),
        (["a.example", " b.example ", ""], tuple[str, ...], ("a.example", "b.example")),
        ("STREAM", Liveness, Liveness.STREAM),
    ],
)
def test_json_values_parse_like_their_text(raw: object, kind: object, expected: object) -> None:
    """CDK context gives booleans, numbers and lists as JSON; they read as their text would."""
    assert parse_value(raw, kind) == expected


@pytest.mark.parametrize(
    ("raw", "kind"), [(2.5, int), ("1.5", int), (float("inf"), float), ("hybrid", Liveness)]
)
def test_values_that_are_not_of_the_type_are_refused(raw: object, kind: object) -> None:
    """A fractional whole number, an infinite float or an unknown enum value is a ValueError."""
    with pytest.raises(ValueError):
        parse_value(raw, kind)


def test_a_client_asked_for_one_attempt_never_retries_behind_the_callers_back() -> None:
    """botocore's ``max_attempts`` counts retries; ``aws.client`` means attempts in all, so a
    caller that must send nothing after a deadline (sinks, session renewals) gets exactly one."""
    from streamlease import aws

    settings = Settings(aws_endpoint_url="http://127.0.0.1:9")
    one = aws.client("dynamodb", settings, max_attempts=1)
    default = aws.client("dynamodb", settings)
    assert one.meta.config.retries["total_max_attempts"] == 1
    assert default.meta.config.retries["total_max_attempts"] == 3


def test_the_local_stack_runs_the_file_or_the_kinesis_sink_and_nothing_else():
    """STREAMLEASE_LOCAL_SINK picks the local workers' sink; a typo is refused by name."""
    assert Settings.from_env({"STREAMLEASE_LOCAL_SINK": "kinesis"}).local_sink == "kinesis"
    with pytest.raises(ConfigError, match="STREAMLEASE_LOCAL_SINK"):
        Settings.from_env({"STREAMLEASE_LOCAL_SINK": "kinsis"})
