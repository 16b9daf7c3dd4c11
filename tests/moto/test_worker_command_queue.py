"""The worker's command queue against SQS (moto server): a long poll cancelled by a stopping
worker gives back what it receives, and the worker can wait for that before it exits."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from streamlease import aws
from streamlease.commands import Command, CommandType
from streamlease.settings import Settings
from worker.ownership.commands import CommandQueue

POLL_WAIT_SECONDS = 2


class SlowToGiveBack:
    """The real SQS client, whose give-back takes a while (a slow network at the moment the
    worker exits): what ``settle`` waits for is then plainly not done without it."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def change_message_visibility_batch(self, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return self._sqs.change_message_visibility_batch(**kwargs)


async def test_a_cancelled_poll_gives_back_what_it_gets_and_settle_waits_for_it(
    aws_settings: Settings,
) -> None:
    """A stopping worker cancels its poll while the long poll is still open, then sends its
    handoffs: the open poll receives one. Once ``settle`` returns, that command is visible to
    the next worker at once (received a second time), not after the visibility timeout."""
    sqs = aws.client("sqs", aws_settings)
    url = aws_settings.queue_url
    queue = CommandQueue(SlowToGiveBack(sqs), url, POLL_WAIT_SECONDS)  # type: ignore[arg-type]
    poll = asyncio.create_task(queue.receive(10))
    await asyncio.sleep(0.3)  # the long poll is open on the server
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    body = Command(CommandType.HANDOFF, "handed-off", 1).to_json()
    await asyncio.to_thread(sqs.send_message, QueueUrl=url, MessageBody=body)

    assert await queue.settle(POLL_WAIT_SECONDS + 5)

    got = await asyncio.to_thread(
        sqs.receive_message,
        QueueUrl=url,
        WaitTimeSeconds=0,
        MessageSystemAttributeNames=["ApproximateReceiveCount"],
    )
    (message,) = got.get("Messages", [])
    assert message["Body"] == body
    assert message["Attributes"]["ApproximateReceiveCount"] == "2", "the open poll had it"


async def test_settle_with_no_cancelled_poll_returns_at_once(aws_settings: Settings) -> None:
    queue = CommandQueue(aws.client("sqs", aws_settings), aws_settings.queue_url, 1)
    assert await queue.settle(0.0)
