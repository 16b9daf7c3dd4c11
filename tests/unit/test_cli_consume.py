"""``streamlease consume``'s command line: what it refuses before reading anything, and how it
names the stream it reads. Reading the sink is ``tests/integration/test_consume_command.py``'s."""

from __future__ import annotations

import datetime as dt

import pytest
from cli_fake_api import run

from streamlease.cli.consume import ConsumeUsageError, stream_name
from streamlease.cli.target import AwsTarget

AWS_API = "https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--until-idle", "0"], "--until-idle must be more than 0 seconds"),
        (["--until-idle", "soon"], "argument --until-idle: invalid float value"),
        (["--from", "yesterday"], "--from must be trim-horizon, latest or an ISO 8601 time"),
        ([""], "a stream id must not be empty"),
    ],
)
def test_usage_errors_exit_2_before_anything_is_read(argv: list[str], message: str) -> None:
    code, out, err = run("--api", AWS_API, "consume", *argv, environ={})
    assert code == 2
    assert out == ""
    assert err.startswith("streamlease: error: ") and message in err


def test_an_aws_deployment_without_a_stream_name_is_a_usage_error() -> None:
    """The CLI does not guess a stack's name: it says where the name is."""
    code, _, err = run("--api", AWS_API, "--json", "consume", environ={})
    assert code == 2
    assert '"code":"usage"' in err
    assert "STREAMLEASE_KINESIS_STREAM_NAME" in err and "SinkStreamName" in err


def test_the_stream_is_the_flag_then_the_setting_then_the_local_stacks() -> None:
    local = AwsTarget(
        "us-east-1",
        "http://127.0.0.1:5000",
        local=True,
        stack={"kinesis_stream_name": "local-records"},
    )
    assert stream_name("flag", "setting", local) == "flag"
    assert stream_name(None, "setting", local) == "setting"
    assert stream_name(None, "", local) == "local-records"
    with pytest.raises(ConsumeUsageError):
        stream_name(None, "", AwsTarget("eu-west-1", None, local=False))


def test_from_takes_a_time_without_a_zone_as_utc() -> None:
    from streamlease.cli.consume import start_position

    position = start_position("2026-03-01T09:30:00")
    assert position.timestamp == dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC)
    assert start_position("LATEST").kind == "LATEST"
