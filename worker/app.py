"""The worker process: its parts, its task groups and its shutdown, in one place.

Two task groups. The *stream* group holds one task per held stream (:class:`StreamHolder`); the
*service* group, nested inside it, holds the loops: the command poller, the reconciler and its
takeover scheduler, the rebalancer (these four *take* streams), the renewal loop, the worker-item
heartbeat, the metrics flusher and the liveness ticker.

Shutdown (first SIGTERM/SIGINT), in this order, under ``shutdown_budget_seconds``:

1. stop taking streams (poller, reconciler, takeovers, rebalancer are cancelled);
2. mark the worker item DRAINING, so the fleet stops counting this worker;
3. every holder: stop reading, close 1001, drain its queue into the sink, final checkpoint +
   release, handoff — all in parallel (DynamoDB calls bounded by the thread pool); renewals keep
   running meanwhile, so no lease lapses while it drains;
4. stop the remaining loops, flush metrics, delete the worker item, close the sink, exit 0.

A second signal skips the draining of queued messages (holders release at once with the last
acknowledged checkpoint). Past the budget the remaining holders are cancelled and the exit status
is 1: their leases lapse and the fleet takes them over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Final

from streamlease import aws
from streamlease.lease_store import LeaseStore
from streamlease.settings import Settings
from worker import logs
from worker.acquisition import Acquirer
from worker.blocking import DEFAULT_THREADS, install_executor
from worker.commands import CommandPoller, CommandQueue, given_away_window_seconds
from worker.context import WorkerContext
from worker.fleet import FleetView, WorkerItem
from worker.holder import EndReason
from worker.holdings import Holdings
from worker.identity import Identity, resolve_identity
from worker.lease_events import LeaseEventLog
from worker.logs import describe, logger
from worker.metrics import EmfPublisher, WorkerMetrics, flush, flush_periodically
from worker.process import install_signal_handlers, raise_open_file_limit, tick
from worker.rebalancer import Rebalancer
from worker.reconciler import Reconciler
from worker.renewal import Renewals
from worker.sinks import Sink, load_sink

EXIT_OK: Final = 0
EXIT_BUDGET_EXCEEDED: Final = 1
EXIT_RESERVE_SECONDS: Final = 5.0
"""Part of the shutdown budget kept for flushing metrics and deleting the worker item (at most
a tenth of the budget, so a short budget still leaves most of it for draining)."""
HURRY_SECONDS: Final = 5.0
"""After a second signal, how long holders still get to release."""
DRAIN_CHECK_SECONDS: Final = 0.2


class Worker:
    """One worker process's parts, wired together. Build with :meth:`create`, then :meth:`run`."""

    def __init__(
        self,
        settings: Settings,
        identity: Identity,
        dynamodb: Any,
        sqs: Any,
        sink: Sink,
        *,
        shutdown_requested: asyncio.Event | None = None,
        hurry: asyncio.Event | None = None,
    ) -> None:
        """``dynamodb``/``sqs``: boto3 clients (the SQS one with a read timeout > poll wait);
        the events, when given, are those the signal handlers set."""
        self.settings = settings
        self.queue = CommandQueue(sqs, settings.queue_url, settings.poll_wait_seconds)
        self.holdings = Holdings(
            settings.capacity, given_away_window_seconds(settings.reconcile_seconds)
        )
        self.metrics = WorkerMetrics(lambda: self.holdings.active_count)
        self.ctx = WorkerContext(
            settings=settings,
            identity=identity,
            store=LeaseStore(dynamodb, settings.table_name, clock_skew_ms=settings.clock_skew_ms),
            sink=sink,
            metrics=self.metrics,
            events=LeaseEventLog(settings.lease_event_log, identity.worker_id),
            handoffs=self.queue,
            shutdown_requested=shutdown_requested or asyncio.Event(),
            hurry=hurry or asyncio.Event(),
        )
        self.view = FleetView()
        self.renewals = Renewals(self.ctx)
        self.acquirer = Acquirer(self.ctx, self.holdings, self.renewals)
        self.poller = CommandPoller(self.ctx, self.queue, self.acquirer, self.holdings, self.view)
        self.reconciler = Reconciler(self.ctx, self.acquirer, self.holdings, self.view)
        self.rebalancer = Rebalancer(self.ctx, self.holdings, self.view)
        self.worker_item = WorkerItem(self.ctx, self.holdings)
        self.publisher = EmfPublisher(settings.metrics_namespace)
        self._shutdown_started = 0.0

    @classmethod
    async def create(
        cls, settings: Settings, identity: Identity, **events: asyncio.Event
    ) -> Worker:
        """Build the boto3 clients and the sink (in a thread: building clients reads files);
        ``events``: ``shutdown_requested`` and ``hurry`` (see :meth:`__init__`)."""

        def build() -> tuple[Any, Any, Sink]:
            dynamodb = aws.client("dynamodb", settings)
            sqs = aws.client(
                "sqs", settings, read_timeout_seconds=settings.poll_wait_seconds + 10.0
            )
            return dynamodb, sqs, load_sink(settings)

        dynamodb, sqs, sink = await asyncio.to_thread(build)
        return cls(settings, identity, dynamodb, sqs, sink, **events)

    async def run(self) -> int:
        """Run until a signal and a graceful drain; returns the exit status."""
        ctx = self.ctx
        settings = self.settings
        await self.worker_item.publish()
        with contextlib.suppress(Exception):
            await self.rebalancer.refresh_view()
        logger.info(
            "worker started",
            capacity=settings.capacity,
            lease_seconds=settings.lease_seconds,
            heartbeat_seconds=settings.heartbeat_seconds,
            sink=settings.sink.partition(":")[0],
            task_arn=ctx.identity.task_arn,
            version=ctx.identity.version,
        )
        status = EXIT_OK
        try:
            async with asyncio.TaskGroup() as streams:
                self.holdings.bind(streams)
                async with asyncio.TaskGroup() as services:
                    upkeep = [
                        services.create_task(self.renewals.renew_leases(), name="renewals"),
                        services.create_task(self.worker_item.heartbeat(), name="worker item"),
                        services.create_task(
                            flush_periodically(
                                self.metrics, self.publisher, settings.metrics_flush_seconds
                            ),
                            name="metrics",
                        ),
                        services.create_task(tick(settings.health_file, self.metrics), name="tick"),
                    ]
                    takers = [
                        services.create_task(self.rebalancer.rebalance_periodically(), name="rb"),
                        services.create_task(self.reconciler.reconcile_periodically(), name="rc"),
                        services.create_task(self.reconciler.take_over_suspects(), name="to"),
                        services.create_task(self.poller.poll_commands(), name="poller"),
                    ]
                    await ctx.shutdown_requested.wait()
                    self._shutdown_started = time.monotonic()
                    status = await self._drain(takers)
                    for task in upkeep:
                        task.cancel()
        finally:
            await self._finish()
        return status

    async def _drain(self, takers: list[asyncio.Task[None]]) -> int:
        """Shutdown steps 1-3 (see the module docstring); returns the exit status."""
        settings = self.settings
        budget = settings.shutdown_budget_seconds
        deadline = self._shutdown_started + budget - min(EXIT_RESERVE_SECONDS, budget / 10)
        for task in takers:
            task.cancel()
        await asyncio.gather(*takers, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.1, settings.dynamodb_timeout_seconds)):
                await self.worker_item.mark_draining()
        count = self.holdings.end_all(EndReason.SHUTDOWN)
        logger.info("draining", streams=count)
        hurry_deadline: float | None = None
        while self.holdings.count:
            now = time.monotonic()
            if self.ctx.hurry.is_set() and hurry_deadline is None:
                hurry_deadline = now + HURRY_SECONDS
            if now >= deadline or (hurry_deadline is not None and now >= hurry_deadline):
                left = self.holdings.cancel_all()
                logger.error("shutdown budget exceeded", streams_left=left)
                return EXIT_BUDGET_EXCEEDED
            await self.holdings.wait_changed(DRAIN_CHECK_SECONDS)
        logger.info("drained", seconds=round(time.monotonic() - self._shutdown_started, 3))
        return EXIT_OK

    async def _finish(self) -> None:
        """Shutdown step 4: flush metrics, delete the worker item, close the sink and the log."""
        try:
            flush(self.metrics, self.publisher)
        except Exception as exc:
            logger.warning("final metrics flush failed", error=describe(exc))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.1, self.settings.dynamodb_timeout_seconds)):
                await self.worker_item.remove()
        try:
            await self.ctx.sink.close()
        except Exception as exc:
            logger.warning("sink close failed", error=describe(exc))
        self.ctx.events.close()
        logger.info("worker stopped")


async def run_worker(settings: Settings) -> int:
    """The whole process: identity, clients, signals, run; returns the exit status."""
    loop = asyncio.get_running_loop()
    shutdown_requested, hurry = asyncio.Event(), asyncio.Event()

    def leave_faster() -> None:
        shutdown_requested.set()
        hurry.set()

    install_signal_handlers(loop, shutdown_requested.set, leave_faster)
    install_executor(loop, DEFAULT_THREADS)
    raise_open_file_limit()
    identity = await resolve_identity(settings)
    logs.configure(settings.log_level, identity.worker_id)
    worker = await Worker.create(
        settings, identity, shutdown_requested=shutdown_requested, hurry=hurry
    )
    return await worker.run()
