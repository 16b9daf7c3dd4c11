"""The command queue: the SQS long poll that brings start/handoff hints, and handoff sends.

A command only says "this stream may need an owner". The worker answers with an acquire, whose
condition is the truth (STARTED, free or expired); the command's generation is not trusted over
the item. The message is deleted once the acquire decided something (won, owned elsewhere,
stopped, gone); a worker without room puts it straight back (visibility 0) for another worker;
an unanswered acquire leaves it to come back after the visibility timeout, unless the worker is
draining: then it goes straight back too (this worker will not try again, and during a fleet's
replacement the next owner should not wait out the timeout).

Malformed messages (not a current-version command) are deleted and logged with their message id
only: they can never become valid, and redelivering them would cost every worker a receive.

The long poll runs in a daemon thread: a worker shutting down never waits for it, and messages a
cancelled poll received after all are made visible again at once.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from streamlease import placement, rules
from streamlease.commands import COMMAND_MAX_RECEIVES, Command, CommandType
from streamlease.telemetry import TRACE_MESSAGE_ATTRIBUTE
from worker.blocking import run_in_daemon_thread
from worker.context import WorkerContext
from worker.logs import describe, logger
from worker.ownership.acquisition import Acquirer, Outcome
from worker.ownership.fleet_view import FleetView, wants_handoffs
from worker.ownership.holdings import Holdings

if TYPE_CHECKING:
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import MessageTypeDef

MAX_MESSAGES_PER_RECEIVE: Final = 10
"""SQS returns at most 10 messages per receive."""
IDLE_CHECK_SECONDS: Final = 0.1
"""How often a worker that may not take more streams looks again (an in-memory check: the
share changes when the rebalancer recounts, the holdings when a stream leaves)."""
ERROR_PAUSE_SECONDS: Final = 1.0
PASS_ON_LIMIT: Final = COMMAND_MAX_RECEIVES - 2
"""A rebalance handoff is passed on by workers not below their share until this receive, well
before the dead-letter queue takes it (at its ``COMMAND_MAX_RECEIVES``-th)."""
PASS_ON_PAUSE_SECONDS: Final = 2.0
"""After passing a rebalance handoff on, a worker receives nothing for this long, so the next
delivery goes to a worker below its share. Without it the worker that passed it on polls again at
once and, SQS delivering to whoever asks first, receives it again until the pass-on limit makes it
take it: a wasted handover. (A long poll already waiting may take a second to see a message made
visible again.)"""


def receive_count(share: int, held: int, free: int) -> int:
    """Messages to ask for: up to the room left under the fair share and capacity (1..10)."""
    room_under_share = max(1, share - held)
    return max(1, min(MAX_MESSAGES_PER_RECEIVE, free, room_under_share))


def wait_seconds(poll_wait_seconds: float) -> int:
    """SQS ``WaitTimeSeconds`` for a setting: whole seconds, 0 to 20."""
    return max(0, min(20, math.ceil(poll_wait_seconds)))


class CommandQueue:
    """SQS adapter: receive, delete, return, and send handoffs. Calls never block the loop."""

    def __init__(self, sqs: SQSClient, queue_url: str, poll_wait_seconds: float) -> None:
        """``sqs``: a boto3 SQS client whose read timeout exceeds the poll wait."""
        self._sqs = sqs
        self._url = queue_url
        self._wait = wait_seconds(poll_wait_seconds)
        self._abandoned: list[threading.Event] = []
        """Set when a receive whose poll was cancelled has ended (and given back what it got)."""

    async def receive(self, count: int) -> list[MessageTypeDef]:
        """Long-poll for up to ``count`` messages. Raises botocore errors. Cancelled, the poll
        goes on in its thread and gives back what it gets (see :meth:`settle`)."""
        abandoned, ended = threading.Event(), threading.Event()
        try:
            return await run_in_daemon_thread(self._receive_blocking, count, abandoned, ended)
        except asyncio.CancelledError:
            abandoned.set()
            self._abandoned.append(ended)
            raise

    async def settle(self, limit_seconds: float) -> bool:
        """Wait, at most ``limit_seconds``, for the receives of cancelled polls to end. A
        stopping worker calls it last: its own long poll, still open, may receive the handoffs
        it has just sent, and exiting before that poll gives them back would leave them to the
        visibility timeout (a stream handed off, waiting ~30 s for its next owner). True when
        none is left."""
        deadline = time.monotonic() + limit_seconds
        for ended in self._abandoned:
            left = deadline - time.monotonic()
            if left <= 0 or not await asyncio.to_thread(ended.wait, left):
                return False
        self._abandoned = []
        return True

    def _receive_blocking(
        self, count: int, abandoned: threading.Event, ended: threading.Event
    ) -> list[MessageTypeDef]:
        try:
            response = self._sqs.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=count,
                WaitTimeSeconds=self._wait,
                MessageSystemAttributeNames=["ApproximateReceiveCount", TRACE_MESSAGE_ATTRIBUTE],
            )
            messages = response.get("Messages", [])
            if abandoned.is_set() and messages:
                # Nobody will act on them: another worker may have them now, not after the
                # visibility timeout.
                self._sqs.change_message_visibility_batch(
                    QueueUrl=self._url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                        for i, m in enumerate(messages)
                    ],
                )
            return messages
        finally:
            ended.set()

    async def delete(self, receipt_handle: str) -> None:
        """Delete a handled message (failures are logged: it only comes back as a hint)."""
        try:
            await asyncio.to_thread(
                self._sqs.delete_message, QueueUrl=self._url, ReceiptHandle=receipt_handle
            )
        except (BotoCoreError, ClientError) as exc:
            logger.info("command delete failed", error=describe(exc))

    async def give_back(self, receipt_handle: str, delay_seconds: float = 0.0) -> None:
        """Make a message visible again after ``delay_seconds`` (whole seconds), for others."""
        try:
            await asyncio.to_thread(
                self._sqs.change_message_visibility,
                QueueUrl=self._url,
                ReceiptHandle=receipt_handle,
                VisibilityTimeout=max(0, math.ceil(delay_seconds)),
            )
        except (BotoCoreError, ClientError) as exc:
            logger.info("command return failed", error=describe(exc))

    async def send_handoff(
        self, stream_id: str, generation: int, *, rebalance: bool = False
    ) -> bool:
        """Send a HANDOFF command (``rebalance``: meant for a worker below its fair share); True
        when SQS accepted it. Never raises for SQS errors."""
        body = Command(CommandType.HANDOFF, stream_id, generation, rebalance).to_json()
        try:
            await asyncio.to_thread(self._sqs.send_message, QueueUrl=self._url, MessageBody=body)
        except (BotoCoreError, ClientError) as exc:
            logger.warning("handoff send failed", stream_id=stream_id, error=describe(exc))
            return False
        return True


class CommandPoller:
    """Receives commands while this worker may take more (:meth:`_may_take_more`)."""

    def __init__(
        self,
        ctx: WorkerContext,
        queue: CommandQueue,
        acquirer: Acquirer,
        holdings: Holdings,
        fleet: FleetView,
    ) -> None:
        self._ctx = ctx
        self._queue = queue
        self._acquirer = acquirer
        self._holdings = holdings
        self._fleet = fleet
        self._paused_until = 0.0
        """Monotonic time before which nothing is received (see PASS_ON_PAUSE_SECONDS)."""
        self._next_take = 0.0
        """Monotonic time before which no rebalance handoff is taken
        (:func:`~streamlease.placement.take_delay`)."""

    async def poll_commands(self) -> None:
        """Receive and handle commands until cancelled; any error pauses, then polling goes on."""
        holdings = self._holdings
        while not self._ctx.shutdown_requested.is_set():
            paused = self._paused_until - time.monotonic()
            if paused > 0:
                await asyncio.sleep(paused)
                continue
            if not (self._acquirer.may_acquire() and self._may_take_more()):
                # Look again when a stream leaves or the rebalancer may have recounted.
                await holdings.wait_changed(IDLE_CHECK_SECONDS)
                continue
            count = receive_count(self._fleet.share, holdings.count, holdings.free)
            try:
                messages = await self._queue.receive(count)
            except Exception as exc:
                logger.warning("command poll failed", error=describe(exc))
                await asyncio.sleep(ERROR_PAUSE_SECONDS)
                continue
            if messages:
                async with asyncio.TaskGroup() as tasks:
                    for message in messages:
                        tasks.create_task(
                            self._handle(message),
                            name=f"handle command {message.get('MessageId', '')}",
                        )

    async def _handle(self, message: MessageTypeDef) -> None:
        receipt = str(message.get("ReceiptHandle", ""))
        try:
            command = Command.from_json(str(message.get("Body", "")))
        except ValueError as exc:
            logger.warning(
                "malformed command deleted",
                message_id=message.get("MessageId"),
                problem=str(exc),
            )
            await self._queue.delete(receipt)
            return
        if self._holdings.given_away_recently(command.stream_id):
            # This worker's own handoff: leave it to the others for a while. Not visibility 0,
            # or a worker alone on the queue would receive it again at once, in a tight loop.
            await self._queue.give_back(receipt, self._holdings.given_away_seconds)
            return
        if command.rebalance and not self._below_share() and _receives(message) < PASS_ON_LIMIT:
            # Meant for a worker below its share: taking it would only move the imbalance.
            # Passed on a bounded number of times (a receive counts towards the dead-letter
            # queue); after that, whoever has room takes it.
            self._paused_until = time.monotonic() + PASS_ON_PAUSE_SECONDS
            await self._queue.give_back(receipt)
            return
        if command.rebalance:
            wait, self._next_take = placement.take_delay(self._next_take, time.monotonic())
            if wait > 0:
                try:
                    await asyncio.sleep(wait)
                except asyncio.CancelledError:
                    await asyncio.shield(self._queue.give_back(receipt))  # as mid-acquire
                    raise
        try:
            outcome = await self._acquirer.try_acquire(
                command.stream_id,
                source=command.type.value.lower(),
                trace_header=message.get("Attributes", {}).get(TRACE_MESSAGE_ATTRIBUTE),
            )
        except Exception as exc:  # leave the message; it comes back after the visibility timeout
            logger.warning("command failed", stream_id=command.stream_id, error=describe(exc))
            return
        except asyncio.CancelledError:
            # The worker is stopping mid-acquire: the next owner should not wait out the
            # visibility timeout (shielded: the return itself must not be cut short).
            await asyncio.shield(self._queue.give_back(receipt))
            raise
        if outcome.decided:
            await self._queue.delete(receipt)
        elif outcome is Outcome.NO_ROOM or self._ctx.shutdown_requested.is_set():
            # A draining worker will not try again: the next owner should not wait out the
            # visibility timeout (its own acquire settles the unanswered one's fate).
            await self._queue.give_back(receipt)
        logger.debug(
            "command handled",
            stream_id=command.stream_id,
            type=command.type.value,
            generation=command.generation,
            outcome=outcome.value,
        )

    def _may_take_more(self) -> bool:
        """Poll while below capacity and :func:`~streamlease.rules.may_take_more` by counts, or
        below the fleet's mean load (a worker of many light streams takes a heavy one's
        place)."""
        holdings, fleet = self._holdings, self._fleet
        if rules.may_take_more(
            holdings.count,
            fleet.share,
            holdings.capacity,
            fill_to=fleet.fill_line,
            hold_off=fleet.holds_off(time.monotonic(), self._ctx.settings.rebalance_seconds),
        ):
            return True
        return holdings.count < holdings.capacity and self._below_mean_load()

    def _below_share(self) -> bool:
        return wants_handoffs(self._fleet, self._holdings.count, self._holdings.load.total())

    def _below_mean_load(self) -> bool:
        fleet, mine = self._fleet.load, self._holdings.load.total()
        return fleet is not None and mine is not None and placement.takes_by_load(mine, fleet)


def _receives(message: MessageTypeDef) -> int:
    """How many times SQS has delivered ``message`` (1 the first time)."""
    try:
        return int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
    except (TypeError, ValueError):
        return 1


def given_away_window_seconds(reconcile_seconds: float) -> float:
    """How long a worker leaves a stream it handed off to others (commands and orphans)."""
    return 3.0 * reconcile_seconds
