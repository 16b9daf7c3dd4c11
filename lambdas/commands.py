"""Sending start/handoff hints to the workers' SQS queue.

A command is only a hint: the item in DynamoDB is the truth, and reconciliation finds every
STARTED stream without an owner. So a failed send never fails the caller's request; it is
logged and counted (``CommandSendFailures``) and the stream starts a reconcile interval later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from streamlease.commands import Command, CommandType
from streamlease.telemetry import TRACE_MESSAGE_ATTRIBUTE, ApiMetric

if TYPE_CHECKING:
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import SendMessageRequestTypeDef


def send_command(
    sqs: SQSClient,
    queue_url: str,
    command: Command,
    *,
    logger: Logger,
    on_failure: Callable[[str], None] | None = None,
    trace_header: str | None = None,
) -> bool:
    """Send ``command`` to ``queue_url``; True when SQS accepted it. ``trace_header``: the
    X-Ray trace header it carries to the worker (the ``AWSTraceHeader`` attribute).

    Never raises for a send that fails: logs ``command send failed`` (no message body, no URL)
    and calls ``on_failure(metric_name)`` if given.
    """
    from botocore.exceptions import BotoCoreError, ClientError  # loaded with the client

    request: SendMessageRequestTypeDef = {"QueueUrl": queue_url, "MessageBody": command.to_json()}
    if trace_header:
        request["MessageSystemAttributes"] = {
            TRACE_MESSAGE_ATTRIBUTE: {"DataType": "String", "StringValue": trace_header}
        }
    reason: str
    if not queue_url:
        reason = "no queue configured"
    else:
        try:
            sqs.send_message(**request)
        except ClientError as exc:
            reason = str(exc.response.get("Error", {}).get("Code", "ClientError"))
        except BotoCoreError as exc:
            reason = type(exc).__name__
        else:
            return True
    logger.warning(
        "command send failed",
        stream_id=command.stream_id,
        command_type=command.type.value,
        generation=command.generation,
        reason=reason,
    )
    if on_failure is not None:
        on_failure(ApiMetric.COMMAND_SEND_FAILURES)
    return False


def start_command(stream_id: str, generation: int) -> Command:
    """The START hint for ``stream_id`` at ``generation``."""
    return Command(type=CommandType.START, stream_id=stream_id, generation=generation)


def handoff_command(stream_id: str, generation: int) -> Command:
    """The HANDOFF hint for a stream whose lease was just released by someone else."""
    return Command(type=CommandType.HANDOFF, stream_id=stream_id, generation=generation)
