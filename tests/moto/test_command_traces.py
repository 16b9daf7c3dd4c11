"""The trace header travels with the commands: from the API call (and the reaper) to the SQS
message the worker receives, as the ``AWSTraceHeader`` system attribute."""

from __future__ import annotations

from control_plane_support import Api, CommandQueue

from lambdas.commands import send_command, start_command
from lambdas.runtime import Runtime
from lambdas.tracing import command_trace_header
from streamlease.commands import CommandType
from streamlease.telemetry import TRACE_HTTP_HEADER

URL = "wss://feed.example.com/s"
HEADER = "Root=1-6749f3a4-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"


def test_a_start_command_carries_the_api_calls_trace_header(
    api: Api, commands: CommandQueue
) -> None:
    """POST /streams with API Gateway's X-Amzn-Trace-Id: the START hint carries that header."""
    created = api(
        "POST",
        "/streams",
        body={"id": "traced", "ws_url": URL},
        headers={TRACE_HTTP_HEADER: HEADER},
    )
    assert created.status == 201
    ((command, trace),) = commands.drain_traced()
    assert (command.stream_id, command.type) == ("traced", CommandType.START)
    assert trace == HEADER


def test_a_command_sent_without_a_trace_has_no_trace_attribute(
    control_plane: Runtime, commands: CommandQueue
) -> None:
    """Outside Lambda and without a request header there is no trace to continue."""
    from aws_lambda_powertools import Logger

    header = command_trace_header({})
    assert header is None
    sent = send_command(
        control_plane.sqs,
        control_plane.settings.queue_url,
        start_command("untraced", 1),
        logger=Logger(service="test"),
        trace_header=header,
    )
    assert sent
    ((command, trace),) = commands.drain_traced()
    assert (command.stream_id, trace) == ("untraced", None)


def test_the_request_header_is_found_whatever_its_case() -> None:
    """HTTP header names are case-insensitive; API Gateway may pass it in lower case."""
    assert command_trace_header({TRACE_HTTP_HEADER.lower(): HEADER}) == HEADER
