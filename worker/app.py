"""The worker process: its parts, its task groups and its shutdown, in one place.

Start-up: read the fleet (a worker refuses to join a fleet that runs the other liveness mode),
open the session (the worker item; its renewal thread starts), then two task groups. The
*stream* group holds one task per held stream (:class:`StreamHolder`); the *service* group,
nested inside it, holds the loops: the command poller, the reconciler (and, per-stream mode,
its takeover scheduler) and the rebalancer (these *take* streams), the session keeper, the fleet
watcher (dead sessions, fair share), the own-lease poll and the delivery gate (sessions) or the
per-stream renewal loop, the connection-state writer, the upstream keepalive, the metrics flusher,
the liveness ticker and the reader of the lease table's write units (which pace the fleet's
handoffs; first read before the loops start). The data path itself has no task of its own: each
connection calls its holder back with every batch, and the sink's flusher stores the batches of
every stream together.

A lost session (expired, or revoked by this worker after a gray failure) is replaced by a new
one, and a worker whose renewals have gone unanswered for too long gives up and exits with
:data:`~worker.liveness.session_keeper.EXIT_UNREACHABLE` (:mod:`worker.liveness.session_keeper`).

Shutdown (first SIGTERM/SIGINT), in this order, under ``shutdown_budget_seconds``:

1. stop taking streams (poller, reconciler, takeovers, rebalancer are cancelled);
2. mark the session DRAINING, so the fleet stops counting this worker;
3. every holder: stop reading, let the sink take what it received, close 1001, final
   checkpoint + release, handoff — all in parallel (DynamoDB calls bounded by the thread
   pool); the session keeps renewing meanwhile, so no stream is fenced while it drains; then
   wait for the command poll cancelled in step 1 to end (at most its long-poll wait): still
   open, it may receive this worker's own handoffs, which it gives back;
4. stop the remaining loops, flush metrics, close the sink (what is still in it is settled:
   nothing is sent under a deadline that has passed), revoke the session (its tombstone,
   etcd's revoke: a renewal still on its way can never bring it back; the fleet deletes it
   later), exit 0.

A second signal skips the draining of queued messages (holders release at once with the last
acknowledged checkpoint). Past the budget the remaining holders are cancelled and the exit status
is 1: the session's tombstone lets the fleet sweep what is left at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import TYPE_CHECKING, Final

from streamlease import aws
from streamlease.errors import SessionExpired, StoreError
from streamlease.fleet_digest import DigestStore
from streamlease.lease_store import LeaseStore
from streamlease.schema import Liveness
from streamlease.session_store import SessionStore
from streamlease.settings import Settings
from streamlease.table_capacity import read_table_write_units
from worker import logs
from worker.blocking import DEFAULT_THREADS, install_executor
from worker.context import WorkerContext
from worker.identity import Identity, resolve_identity
from worker.lease_event_log import LeaseEventLog
from worker.liveness.fleet import FleetWatcher
from worker.liveness.gone_sessions import GoneSessions
from worker.liveness.session_keeper import EXIT_UNREACHABLE, SessionKeeper
from worker.liveness.takeover import Takeover
from worker.liveness.ticker import tick
from worker.logs import describe, logger
from worker.metrics import EmfPublisher, WorkerMetrics, flush, flush_periodically
from worker.os_limits import raise_open_file_limit
from worker.ownership.acquisition import Acquirer
from worker.ownership.commands import CommandPoller, CommandQueue, given_away_window_seconds
from worker.ownership.end_reason import EndReason
from worker.ownership.fleet_view import FleetView
from worker.ownership.holdings import Holdings
from worker.ownership.own_leases import OwnLeases
from worker.ownership.rebalancer import Rebalancer
from worker.ownership.reconciler import Reconciler
from worker.ownership.renewal import Renewals
from worker.ownership.table_capacity import TableCapacity
from worker.secrets import Secrets
from worker.signals import install_signal_handlers
from worker.sinks import Sink, load_sink
from worker.stream.connection_report import ConnectionReport
from worker.stream.keepalive import keepalive_from
from worker.tracing import Tracing

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_sqs import SQSClient

EXIT_OK: Final = 0
EXIT_BUDGET_EXCEEDED: Final = 1
EXIT_RESERVE_SECONDS: Final = 5.0
"""Part of the shutdown budget kept for flushing metrics and revoking the session (at most a
tenth of the budget, so a short budget still leaves most of it for draining)."""
HURRY_SECONDS: Final = 5.0
"""After a second signal, how long holders still get to release."""
DRAIN_CHECK_SECONDS: Final = 0.2
GC_YOUNG_OBJECTS: Final = 10_000
"""Net new container objects that start a collection of the young generation (CPython's
default is 700). The data path keeps a few thousand short-lived objects alive at any moment —
batches wait up to 20 ms in the sink's buffer — so at the default nearly all of them were alive
at each collection, promoted, and the old generation (every held stream's connection objects)
traversed every few seconds: about a third of the worker's CPU per message at 1,000 streams ×
10 msg/s. Young objects that die between collections cost a collection nothing."""


class Worker:
    """One worker process's parts, wired together. Build with :meth:`create`, then :meth:`run`."""

    def __init__(
        self,
        settings: Settings,
        identity: Identity,
        dynamodb: DynamoDBClient,
        sqs: SQSClient,
        sink: Sink,
        *,
        renewal_dynamodb: DynamoDBClient | None = None,
        shutdown_requested: asyncio.Event | None = None,
        hurry: asyncio.Event | None = None,
    ) -> None:
        """``dynamodb``/``sqs``: boto3 clients (the SQS one with a read timeout > poll wait);
        ``renewal_dynamodb``: the session renewal thread's own client (default ``dynamodb``);
        the events, when given, are those the signal handlers set."""
        self.settings = settings
        self.queue = CommandQueue(sqs, settings.queue_url, settings.poll_wait_seconds)
        self.holdings = Holdings(
            settings.capacity, given_away_window_seconds(settings.reconcile_seconds)
        )
        self.metrics = WorkerMetrics(lambda: self.holdings.active_count)
        self.sessions = SessionStore(dynamodb, settings.table_name)
        self.ctx = WorkerContext(
            settings=settings,
            identity=identity,
            store=LeaseStore(
                dynamodb,
                settings.table_name,
                clock_skew_ms=settings.clock_skew_ms,
                liveness=settings.liveness,
            ),
            sessions=self.sessions,
            sink=sink,
            metrics=self.metrics,
            events=LeaseEventLog(settings.lease_event_log, identity.worker_id),
            handoffs=self.queue,
            shutdown_requested=shutdown_requested or asyncio.Event(),
            hurry=hurry or asyncio.Event(),
            secrets=Secrets(settings),
            connections=ConnectionReport(progress_seconds=settings.progress_seconds),
            keepalive=keepalive_from(settings.ping_interval_seconds, settings.ping_timeout_seconds),
            tracing=Tracing.from_settings(settings),
        )
        self.uses_sessions = settings.liveness is Liveness.SESSION
        self.view = FleetView()
        self.renewals = Renewals(self.ctx)
        self.acquirer = Acquirer(self.ctx, self.holdings, self.renewals)
        self.poller = CommandPoller(self.ctx, self.queue, self.acquirer, self.holdings, self.view)
        self.reconciler = Reconciler(self.ctx, self.acquirer, self.holdings, self.view)
        self.rebalancer = Rebalancer(self.ctx, self.holdings, self.view)
        self.takeover = Takeover(self.ctx, self.acquirer, self.holdings, self.view)
        self.fleet = FleetWatcher(
            self.ctx,
            self.holdings,
            self.view,
            self.takeover,
            DigestStore(dynamodb, settings.table_name, clock_skew_ms=settings.clock_skew_ms),
        )
        self.gone_sessions = GoneSessions(self.ctx, self.view)
        self.keeper = SessionKeeper(
            self.ctx,
            self.holdings,
            SessionStore(renewal_dynamodb or dynamodb, settings.table_name),
            self.metrics.observe,
            self.renewals.unanswered,
        )
        self.own_leases = OwnLeases(
            self.ctx, self.holdings, self.keeper.request_rollover, sessions=self.uses_sessions
        )
        self.table_capacity = TableCapacity(
            self.ctx, lambda: read_table_write_units(dynamodb, settings.table_name)
        )
        self.publisher = EmfPublisher(settings.metrics_namespace)
        self._shutdown_started = 0.0

    @classmethod
    async def create(
        cls, settings: Settings, identity: Identity, **events: asyncio.Event
    ) -> Worker:
        """Build the boto3 clients and the sink (in a thread: building clients reads files);
        ``events``: ``shutdown_requested`` and ``hurry`` (see :meth:`__init__`)."""

        def build() -> tuple[DynamoDBClient, DynamoDBClient, SQSClient, Sink]:
            dynamodb = aws.client("dynamodb", settings)
            # The session renewal: no botocore retries behind its back (it retries on its own
            # schedule, with a fresh expiry) and the short DynamoDB timeout.
            renewal = aws.client("dynamodb", settings, max_attempts=1)
            sqs = aws.client(
                "sqs", settings, read_timeout_seconds=settings.poll_wait_seconds + 10.0
            )
            return dynamodb, renewal, sqs, load_sink(settings)

        dynamodb, renewal, sqs, sink = await asyncio.to_thread(build)
        return cls(settings, identity, dynamodb, sqs, sink, renewal_dynamodb=renewal, **events)

    async def run(self) -> int:
        """Run until a signal and a graceful drain; returns the exit status. Raises
        :class:`ConfigError` when the fleet runs the other liveness mode."""
        ctx = self.ctx
        settings = self.settings
        await self.keeper.join_fleet()
        if not await self.keeper.open_session():
            return EXIT_OK  # asked to stop before DynamoDB ever answered
        with contextlib.suppress(Exception):
            await self.fleet.refresh()
        await self.table_capacity.refresh()  # before the rebalancer's first round
        # Everything built so far (boto3's service models, clients, settings) lives as long as
        # the process: out of the garbage collector's sight, a full collection does not walk
        # hundreds of thousands of objects that can never be garbage. Collected first, so
        # no garbage of the start-up (a retried call's exception cycle) is frozen with them.
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_OBJECTS, *gc.get_threshold()[1:])
        logger.info(
            "worker started",
            liveness=settings.liveness.value,
            capacity=settings.capacity,
            lease_seconds=settings.lease_seconds,
            heartbeat_seconds=settings.heartbeat_seconds,
            table_write_units=ctx.table_write_units,
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
                        services.create_task(self.keeper.keep(), name="session keeper"),
                        services.create_task(
                            self.fleet.watch_fleet(services), name="fleet watcher"
                        ),
                        services.create_task(
                            flush_periodically(
                                self.metrics, self.publisher, settings.metrics_flush_seconds
                            ),
                            name="metrics flusher",
                        ),
                        services.create_task(
                            tick(settings.health_file, self.metrics, self._on_tick),
                            name="liveness ticker",
                        ),
                        services.create_task(
                            ctx.connections.run(ctx.store), name="connection state writer"
                        ),
                        services.create_task(
                            self.table_capacity.refresh_periodically(),
                            name="table capacity reader",
                        ),
                    ]
                    if ctx.keepalive is not None:
                        upkeep.append(
                            services.create_task(ctx.keepalive.run(), name="upstream keepalive")
                        )
                    takers = [
                        services.create_task(
                            self.rebalancer.rebalance_periodically(), name="rebalancer"
                        ),
                        services.create_task(
                            self.reconciler.reconcile_periodically(), name="reconciler"
                        ),
                        services.create_task(self.poller.poll_commands(), name="command poller"),
                        services.create_task(
                            self.gone_sessions.free_periodically(), name="gone session sweeper"
                        ),
                    ]
                    upkeep.append(
                        services.create_task(self.own_leases.watch(), name="own lease poller")
                    )
                    if self.uses_sessions:
                        upkeep.append(
                            services.create_task(
                                ctx.gate.run(lambda: ctx.session, self.holdings.deliveries),
                                name="delivery gate",
                            )
                        )
                    else:
                        upkeep.append(
                            services.create_task(
                                self.renewals.renew_leases(), name="per-stream lease renewer"
                            )
                        )
                        takers.append(
                            services.create_task(
                                self.reconciler.take_over_suspects(),
                                name="suspect takeover scheduler",
                            )
                        )
                    await ctx.shutdown_requested.wait()
                    self._shutdown_started = time.monotonic()
                    status = await self._drain(takers)
                    if self.keeper.gave_up:
                        status = EXIT_UNREACHABLE
                    for task in upkeep:
                        task.cancel()
        finally:
            await self._finish()
        return status

    def _on_tick(self, lag_seconds: float) -> None:
        self.ctx.loop_lag_seconds = lag_seconds
        self.keeper.on_tick()

    # --- shutdown ----------------------------------------------------------------------------

    async def _drain(self, takers: list[asyncio.Task[None]]) -> int:
        """Shutdown steps 1-3 (see the module docstring); returns the exit status."""
        settings = self.settings
        budget = settings.shutdown_budget_seconds
        deadline = self._shutdown_started + budget - min(EXIT_RESERVE_SECONDS, budget / 10)
        for task in takers:
            task.cancel()
        await asyncio.gather(*takers, return_exceptions=True)
        session = self.ctx.session
        if session is not None and session.live:
            try:
                async with asyncio.timeout(max(0.1, settings.dynamodb_timeout_seconds)):
                    await session.drain()
            except (TimeoutError, StoreError, SessionExpired) as exc:
                logger.warning("could not mark the session draining", error=describe(exc))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.1, settings.dynamodb_timeout_seconds)):
                await self.fleet.resign()  # a large fleet's digest: taken over at once
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
        # The command poll cancelled above may still be open and get our own handoffs.
        if not await self.queue.settle(max(0.0, deadline - time.monotonic())):
            logger.warning("command poll still open at exit")
        logger.info("drained", seconds=round(time.monotonic() - self._shutdown_started, 3))
        return EXIT_OK

    async def _finish(self) -> None:
        """Shutdown step 4: flush metrics, revoke the session, close the sink and the log."""
        try:
            flush(self.metrics, self.publisher)
        except Exception as exc:
            logger.warning("final metrics flush failed", error=describe(exc))
        # The sink settles first: a batch of a holding cut short (the budget ran out, or its
        # session was lost) may still be in it, and the tombstone lets peers take its stream
        # at once.
        try:
            await self.ctx.sink.close()
        except Exception as exc:
            logger.warning("sink close failed", error=describe(exc))
        await self.keeper.revoke()
        self.ctx.events.close()
        self.ctx.tracing.shutdown()
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
