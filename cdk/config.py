"""What an operator may choose about a deployment, as plain values.

:mod:`cdk.app` fills :class:`DeploymentConfig` from CDK context; every stack and construct gets the
parts it needs as constructor arguments and reads nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from streamlease import telemetry
from streamlease.commands import COMMAND_MAX_RECEIVES
from streamlease.errors import ConfigError
from streamlease.schema import Liveness
from streamlease.settings import Settings
from streamlease.table_capacity import ON_DEMAND_WRITE_UNITS


class NetworkingMode(StrEnum):
    """Where the worker tasks run."""

    PUBLIC = "public"
    """Public subnets, a public IP per task, no NAT gateway (cheapest; no inbound rule is open)."""
    PRIVATE = "private"
    """Private subnets: AWS APIs through VPC endpoints (gateway endpoints for DynamoDB and S3,
    interface endpoints for the rest), upstreams through ``nat_gateways`` NAT gateways."""


class SinkCapacity(StrEnum):
    """How the Kinesis sink stream is billed and scaled."""

    ON_DEMAND = "on-demand"
    """Per stream-hour and per GB; scales by itself (no throttling to plan for)."""
    PROVISIONED = "provisioned"
    """Per shard-hour and per 25 KB PUT payload unit, ``sink_shards`` shards of 1 MB/s and
    1,000 records/s each: cheaper for steady traffic."""


class BillingMode(StrEnum):
    """How the lease table is billed."""

    ON_DEMAND = "on-demand"
    PROVISIONED = "provisioned"
    """Provisioned capacity with target-tracking autoscaling between the configured bounds."""


class TableIndexes(StrEnum):
    """Which global secondary indexes the lease table has. A deployed table of the previous
    release moves to the current ones through three intermediate stages, one index created or
    dropped per CloudFormation update (``streamlease.indexes.MIGRATION_STAGES``; the migration
    in docs/deploying.md says when to deploy which)."""

    CURRENT = "current"
    """The schema's indexes: a new table, or one whose migration is done."""
    ORPHANS_ADDED = "orphans-added"
    """The previous release's indexes and ``by-shard-expiry``."""
    HOLDER_ADDED = "holder-added"
    """... and ``by-holder``: this release runs from here on (the previous one's workers, still
    running during the rollout, keep their grants)."""
    STATE_EXPIRY_DROPPED = "state-expiry-dropped"
    """... without ``by-state-expiry``; the next stage (current) drops ``by-owner``."""

    @property
    def stage(self) -> int | None:
        """Its index in ``MIGRATION_STAGES`` (None: the current indexes)."""
        order = (
            TableIndexes.ORPHANS_ADDED,
            TableIndexes.HOLDER_ADDED,
            TableIndexes.STATE_EXPIRY_DROPPED,
        )
        return order.index(self) if self in order else None


class CpuArchitecture(StrEnum):
    """CPU architecture of the worker image and tasks."""

    X86_64 = "x86_64"
    ARM64 = "arm64"


HEADROOM_FACTOR: Final = 1.5
"""The fleet at ``max_tasks`` holds this many times ``expected_streams`` with one task lost."""


def min_max_tasks(expected_streams: int, capacity_per_worker: int) -> int:
    """The fewest tasks whose capacity, less one task, holds :data:`HEADROOM_FACTOR` ×
    ``expected_streams``."""
    return math.ceil(HEADROOM_FACTOR * expected_streams / capacity_per_worker) + 1


def settled_tasks(
    expected_streams: int, capacity_per_worker: int, target_load_fraction: float, min_tasks: int
) -> int:
    """Tasks the fleet settles at for ``expected_streams`` wanted streams: target tracking's
    ``⌈streams / (capacity × target)⌉``, at least ``min_tasks``."""
    per_task = capacity_per_worker * target_load_fraction
    return max(min_tasks, math.ceil(expected_streams / per_task))


def spare_at_rest_tasks(expected_streams: int, capacity_per_worker: int) -> int:
    """The fewest tasks that hold ``expected_streams`` with one task's capacity spare: the
    ``Headroom`` alarm's condition for quiet, ``tasks × capacity − streams ≥ capacity``."""
    return math.ceil(expected_streams / capacity_per_worker) + 1


@dataclass(frozen=True)
class CapacityRange:
    """Autoscaling bounds of provisioned DynamoDB capacity, in capacity units per second."""

    minimum: int
    maximum: int

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError(f"capacity range needs 1 <= minimum <= maximum, got {self}")


@dataclass(frozen=True)
class DeploymentConfig:
    """Every choice the app exposes. Durations are in the unit their name says."""

    stack_prefix: str = "Streamlease"
    """Prefix of both stack names; a second deployment in one account uses another prefix."""

    # --- lease protocol and fleet (passed to the worker and Lambdas as settings) ---
    liveness: Liveness = Liveness.SESSION
    """``session`` (one renewal per worker) or ``stream`` (one per held stream). Changing it on a
    running fleet needs a stop of the old fleet first: workers refuse to mix modes."""
    capacity_per_worker: int = 650
    """Streams one task holds at most. The default is the ``light`` preset's (``cdk.presets``):
    sized by ``make bench``'s cost section (``bench/results/capacity.json``) for a 0.25 vCPU arm64
    task at 1 message/s per stream, the streams' measured CPU kept within half the task's vCPU at
    capacity (a Graviton vCPU is slower than the bench's core; reconnect storms and takeovers come
    on top) and their memory within half its memory. Busier feeds need fewer a task: the ``busy``
    preset (10 messages/s) holds 200 (the checkpoint vector's limit is 8,000)."""
    lease_seconds: float = 20.0
    heartbeat_seconds: float = 5.0
    reconcile_seconds: float = 5.0
    allowed_upstream_hosts: tuple[str, ...] = ()
    """Upstream host allow-list; empty allows any public host."""
    secrets_prefix: str = "streamlease/"
    """Secrets Manager names streams' handshake headers may refer to start with this; the
    workers may read those and no others. Empty: streams cannot use secrets."""
    metrics_namespace: str = telemetry.NAMESPACE_DEFAULT

    # --- worker service ---
    expected_streams: int = 1000
    """Streams the deployment is sized for: ``max_tasks`` must hold 1.5 × this with one task
    lost (:func:`min_max_tasks`)."""
    min_tasks: int = 3
    max_tasks: int = 4
    target_load_fraction: float = 0.7
    """Scaling keeps each task's CPU utilization at this fraction, and wanted streams per task
    at no more than this fraction of ``capacity_per_worker``."""
    worker_cpu: int = 256
    """Fargate CPU units per task (1024 = one vCPU)."""
    worker_memory_mib: int = 512
    worker_architecture: CpuArchitecture = CpuArchitecture.ARM64
    fargate_spot: bool = False
    """Run the tasks beyond ``min_tasks`` on Fargate Spot (x86_64, or arm64 on platform 1.4.0
    and later, which the service pins as LATEST; a Spot task gets a 2-minute notice, the 120 s
    stop timeout drains it within that)."""
    container_insights: bool = False
    """Container Insights (standard) on the cluster: per-task CPU, memory, network and storage
    metrics, task counts (``RunningTaskCount``) and their performance log events, billed as
    ~30 custom metrics (~$9 a month) plus the events' log ingestion. Off: the dashboard keeps
    the free ``AWS/ECS`` CPU and memory utilization of the service (average and maximum per
    task); scaling and the ``Headroom`` alarm count the auditor's ``LiveWorkers`` (workers with
    a live session: the tasks that can hold streams) instead of running tasks."""
    networking: NetworkingMode = NetworkingMode.PUBLIC
    nat_gateways: int = 2
    """Private networking: NAT gateways for upstream traffic, one per AZ (2), or 1 outside
    production (cheaper; an AZ outage then cuts every upstream)."""
    sink_capacity: SinkCapacity = SinkCapacity.PROVISIONED
    sink_shards: int = 1
    """Shards of a provisioned sink stream: 1 MB/s and 1,000 records/s of writes each."""

    # --- state ---
    billing: BillingMode = BillingMode.ON_DEMAND
    table_indexes: TableIndexes = TableIndexes.CURRENT
    provisioned_read: CapacityRange = CapacityRange(5, 100)
    provisioned_write: CapacityRange = CapacityRange(5, 500)
    table_warm_write_units: int = 0
    """Write units a second the lease table and each of its indexes are pre-warmed to take at
    once (DynamoDB's warm throughput); 0: no pre-warming (a new on-demand table takes
    ``ON_DEMAND_WRITE_UNITS``, 4,000, and grows with use). At least 4,000; above the per-table
    on-demand quota (40,000 by default) only after a quota increase. A one-time charge."""
    command_visibility_timeout_seconds: int = 30
    command_max_receives: int = COMMAND_MAX_RECEIVES
    """A command received this often without being deleted moves to the dead-letter queue."""

    # --- reading the sink (architecture §7, "The consumer") ---
    consumer: bool = False
    """Deploy the consumer Lambda on the sink stream (``lambdas.consumer.handler``): messages
    fenced by epoch, repeats dropped, watermarks in a table of their own, unreadable records'
    batches to an SQS on-failure queue. Off: nothing of it is deployed."""
    consumer_batching_window_seconds: int = 5
    """How long the consumer's event source gathers records before an invocation (0 to 300). Each
    invocation reads and writes the watermarks of its one shard once, so a busy shard costs at most
    one read and one write per window: at 5 s about 536,000 of each a month per shard (well under
    $1 on demand). Records wait up to this long before they are handed on."""

    # --- control plane and operations ---
    api_rate_limit_per_second: float = 50.0
    api_burst_limit: int = 100
    log_retention_days: int = 30
    alarm_email: str = ""
    """If set, this address is subscribed to the alarm topic (it must confirm once)."""

    def __post_init__(self) -> None:
        problems = []
        try:
            # The worker's own rules decide whether these lease timings can work at all.
            Settings(
                liveness=self.liveness,
                capacity=self.capacity_per_worker,
                lease_seconds=self.lease_seconds,
                heartbeat_seconds=self.heartbeat_seconds,
                reconcile_seconds=self.reconcile_seconds,
            )
        except ConfigError as exc:
            problems.append(str(exc))
        if not 1 <= self.min_tasks <= self.max_tasks:
            problems.append("tasks need 1 <= min_tasks <= max_tasks")
        elif self.expected_streams < 0:
            problems.append("expected_streams must not be negative")
        elif self.max_tasks < min_max_tasks(self.expected_streams, self.capacity_per_worker):
            problems.append(
                f"max_tasks must be at least"
                f" {min_max_tasks(self.expected_streams, self.capacity_per_worker)}: with one task"
                f" lost the fleet must hold {HEADROOM_FACTOR:g} × expected_streams"
                f" ({self.expected_streams}) at {self.capacity_per_worker} streams per task"
            )
        else:
            settled = self.settled_tasks
            if (
                settled * self.capacity_per_worker - self.expected_streams
                < self.capacity_per_worker
            ):
                problems.append(
                    f"min_tasks must be at least"
                    f" {spare_at_rest_tasks(self.expected_streams, self.capacity_per_worker)}:"
                    f" the fleet settles at {settled} tasks for {self.expected_streams} streams,"
                    f" under one task ({self.capacity_per_worker}) of spare capacity, and the"
                    " Headroom alarm would never clear"
                )
            elif settled >= self.max_tasks:
                problems.append(
                    f"max_tasks must be more than {settled}, the tasks the fleet settles at for"
                    f" {self.expected_streams} streams (at max_tasks the Headroom alarm fires)"
                )
        if self.nat_gateways not in (1, 2):
            problems.append("nat_gateways must be 1 or 2")
        if self.sink_shards < 1:
            problems.append("sink_shards must be at least 1")
        if not 0 < self.target_load_fraction < 1:
            problems.append("target_load_fraction must be between 0 and 1 (exclusive)")
        if self.command_max_receives < 1:
            problems.append("command_max_receives must be at least 1")
        if self.command_visibility_timeout_seconds < 1:
            problems.append("command_visibility_timeout_seconds must be at least 1")
        if not 0 <= self.consumer_batching_window_seconds <= 300:
            problems.append("consumer_batching_window_seconds must be from 0 to 300")
        if self.table_warm_write_units and self.table_warm_write_units < ON_DEMAND_WRITE_UNITS:
            problems.append(
                f"table_warm_write_units must be 0 (no pre-warming) or an integer of at least"
                f" {ON_DEMAND_WRITE_UNITS} write units a second, got {self.table_warm_write_units}"
            )
        if self.api_rate_limit_per_second <= 0 or self.api_burst_limit < 1:
            problems.append("API throttling limits must be positive")
        if problems:
            raise ValueError("invalid deployment configuration: " + "; ".join(problems))

    @property
    def renewal_lag_alarm_ms(self) -> int:
        """How late (ms) a renewal may be sent before the renewal-lag alarm counts it: half the
        room a holder has between its heartbeat and its fencing deadline, ``(lease − fence
        margin − heartbeat) / 2``. A renewal later than that room fences its holder."""
        room = self.lease_seconds - Settings.fence_margin_seconds - self.heartbeat_seconds
        return round(room * 1000 / 2)

    @property
    def renewal_answer_age_alarm_ms(self) -> int:
        """How long ago (ms) a worker's last answered renewal may have been sent before the
        answer-age alarm counts it: halfway from a healthy age (a heartbeat) to the holder's
        fencing deadline (lease − fence margin), ``heartbeat + renewal_lag_alarm_ms``. Renewals
        sent on time whose answers do not come back (a gray failure) show here, not in the lag."""
        return round(self.heartbeat_seconds * 1000) + self.renewal_lag_alarm_ms

    @property
    def target_cpu_percent(self) -> float:
        """The scaling target on load: the tasks' average CPU utilization, in percent."""
        return round(100 * self.target_load_fraction, 1)

    @property
    def settled_tasks(self) -> int:
        """Tasks the fleet settles at for ``expected_streams`` (:func:`settled_tasks`)."""
        return settled_tasks(
            self.expected_streams,
            self.capacity_per_worker,
            self.target_load_fraction,
            self.min_tasks,
        )

    @property
    def target_streams_per_task(self) -> float:
        """The scaling target: wanted streams per running task, below the per-task capacity."""
        return round(self.capacity_per_worker * self.target_load_fraction, 2)
