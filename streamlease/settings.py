"""Settings: one frozen object per process, read from the environment once at start-up.

Every setting is a field of :class:`Settings`; its environment variable is ``STREAMLEASE_`` plus
the field name in upper case (``lease_seconds`` → ``STREAMLEASE_LEASE_SECONDS``). This module is
the only place in the project that reads ``os.environ``. Writing settings for another process
goes through :func:`settings_environment` (the CDK app, the local stack, :meth:`Settings.to_env`),
and reading a value of a field's type through :func:`parse_value` (the environment here, CDK
context in the CDK app), so each is done one way.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, get_type_hints

from streamlease.errors import ConfigError
from streamlease.schema import Liveness
from streamlease.telemetry import TraceExport

ENV_PREFIX: Final = "STREAMLEASE_"
MAX_CAPACITY: Final = 8_000
MAX_URL_CHARS: Final = 2048
"""The longest ``ws_url`` the API document allows; the ``max_url_length`` setting may lower it,
never raise it past what the document promises."""
MAX_PAGE_SIZE: Final = 100
"""The most streams one ``GET /streams`` page holds, as the API document states it; the
``page_size_max`` setting may lower it, never raise it past what the document promises."""
LOCAL_SINKS: Final = ("file", "kinesis")
"""The sinks the local stack can run its workers with (``local_sink``)."""

SettingValue = str | int | float | bool | Sequence[str]
"""A value :func:`settings_environment` can write: a field's value, or a CDK token string."""


def env_name(field_name: str) -> str:
    """The environment variable that sets ``field_name``. Raises ``KeyError`` if unknown."""
    return _ENV_NAMES[field_name]


def settings_environment(values: Mapping[str, SettingValue]) -> dict[str, str]:
    """Map ``Settings`` field names to the environment a process reads them from.

    Values are rendered the way :meth:`Settings.from_env` parses them (booleans as
    ``true``/``false``, sequences comma-joined, enums by value); strings, CDK tokens among them,
    pass through. Raises ``KeyError`` for a name that is not a field of ``Settings``.
    """
    return {env_name(field): render_value(value) for field, value in values.items()}


def render_value(value: SettingValue) -> str:
    """One setting's value as the environment text :func:`parse_value` reads back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return ",".join(value)


class UpstreamLibrary(StrEnum):
    """The WebSocket library under every upstream connection of a worker."""

    WEBSOCKETS = "websockets"
    """websockets' sans-I/O client (pure Python framing)."""
    PICOWS = "picows"
    """picows (compiled framing, the lower CPU per message)."""


@dataclass(frozen=True)
class Settings:
    """Everything a streamlease process can be told. Durations are in the unit their name says."""

    # --- AWS resources (names come from the CDK app or the local stack) ---
    table_name: str = "streamlease"
    queue_url: str = ""
    kinesis_stream_name: str = ""
    watermark_table_name: str = ""
    """The consumer Lambda's watermark table (``streamlease.consumer.DynamoWatermarks``)."""
    aws_region: str = "us-east-1"
    aws_endpoint_url: str = ""
    """Empty: the real AWS endpoints. Locally: the moto server, e.g. ``http://127.0.0.1:5000``."""

    # --- lease protocol (architecture §4); keep heartbeat = lease / 4 when changing one ---
    liveness: Liveness = Liveness.SESSION
    """``session``: one renewal per worker, streams attached to it (architecture §4a);
    ``stream``: one renewal per held stream (the seed's protocol, §4b). A fleet runs one mode."""
    lease_seconds: float = 20.0
    heartbeat_seconds: float = 5.0
    reconcile_seconds: float = 5.0
    clock_skew_seconds: float = 1.0
    """An acquirer treats a lease as expired only this long after its stated expiry."""
    fence_margin_seconds: float = 2.0
    """A holder stops delivering this long before its lease could lapse (self-fencing)."""
    handoff_on_release: bool = True
    """Send an SQS handoff command after a graceful release (off in the reference preset)."""
    schedule_suspects: bool = True
    """Schedule an acquire just after the expiry of leases that missed heartbeats."""
    dynamodb_timeout_seconds: float = 2.0
    """Connect and read timeout of each DynamoDB call."""

    # --- fleet ---
    capacity: int = 100
    """Most streams one worker holds."""
    rebalance_seconds: float = 5.0
    """How often a worker weighs shedding streams (jittered ± 20 %): a round costs no request,
    and a scale-out's givers act within a quarter of a lease of learning of the new workers."""
    fleet_recount_seconds: float = 1.0
    """How often a worker re-reads the worker items (one small query of the fleet index). It is
    how a dead session is noticed (its ``hb`` stops moving) and how a DRAINING peer is seen soon
    enough to poll for its handoffs at once instead of waiting for reconciliation."""
    rebalance_slack: int = 1
    """A worker starts shedding only when it holds more than fair share + slack (then goes on
    down to the share while its rounds hand streams off)."""
    shed_batch: int = 2
    """Most streams handed off per rebalance round."""
    min_tenure_seconds: float = 30.0
    """A stream is never shed sooner than this after it was acquired."""
    table_capacity_seconds: float = 600.0
    """How often (±20 %) a worker re-reads the write units a second the lease table can take
    at once (one ``DescribeTable``, a control-plane call: 1,250 workers make about 2 a second)."""
    worker_id: str = ""
    """Empty: derived from the ECS task id or host, pid and a random suffix."""
    task_arn: str = ""
    ecs_container_metadata_uri_v4: str = dataclasses.field(
        default="", metadata={"env": "ECS_CONTAINER_METADATA_URI_V4"}
    )
    """Set by ECS in every task; the worker id and task ARN come from it."""

    # --- commands ---
    poll_wait_seconds: float = 20.0
    visibility_timeout_seconds: float = 30.0

    # --- upstream connections (architecture §5, §6) ---
    resume_param: str = "from_seq"
    """Query parameter that asks the upstream to replay from a sequence number (a stream's
    profile may name another)."""
    secrets_prefix: str = "streamlease/"
    """Secrets Manager names a stream's profile may refer to start with this (the worker may
    read no others); empty: profiles cannot use secrets."""
    allowed_hosts: tuple[str, ...] = ()
    """Upstream host allow-list; empty allows any public host; ``*.example.com``: subdomains."""
    allow_insecure_ws: bool = False
    """Allow ``ws://`` upstreams (local only)."""
    allow_loopback_upstreams: bool = False
    """Allow loopback upstream addresses (local only). Link-local/metadata are refused always."""
    allow_private_upstreams: bool = False
    """Allow RFC 1918 / ULA upstream addresses (a VPC-internal upstream)."""
    connect_timeout_seconds: float = 10.0
    backoff_base_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    stable_seconds: float = 30.0
    """A connection must stay up this long before the reconnect backoff resets."""
    ping_interval_seconds: float = 20.0
    """An upstream connection silent this long is pinged (0: no keepalive)."""
    ping_timeout_seconds: float = 20.0
    """A pinged connection still silent this long after is closed with 1011 (0: no keepalive)."""
    upstream_library: UpstreamLibrary = UpstreamLibrary.WEBSOCKETS
    """The WebSocket library of upstream connections (``websockets`` or ``picows``); the
    guarantees and outcomes are the same."""
    progress_seconds: float = 300.0
    """A held stream's progress counters are written into its item at most this often (besides
    riding on its connection-state changes), and only when they changed."""

    # --- sink ---
    sink: str = "kinesis"
    """``kinesis``, ``file``, ``null`` or ``module:factory``."""
    sink_dir: str = ".local/sink"
    sink_max_attempts: int = 5
    """Attempts per record before a sink write fails with ``SinkError`` (Kinesis: throttling)."""
    kinesis_aggregation: bool = True
    """Pack the messages bound for one shard into KPL aggregated records (read them with the
    KCL or a deaggregation module; :mod:`streamlease.kinesis_records`). Off: one Kinesis record
    of JSON per message, and then one message of each stream per ``PutRecords`` call (so a
    refused record never lets a later one of its stream land first): a stream gets about a
    message per call, tens a second, where aggregated it gets whatever fits 50 KB."""
    sink_timeout_seconds: float = 0.0
    """Connect and read timeout of each Kinesis sink call; 0: half of ``fence_margin_seconds``
    (1 s at the defaults). A call the sink's last fence check let start just before the
    deadline has ended, or been abandoned by the client, about twice this later; the fence
    margin must cover that, so with the Kinesis sink twice this may not exceed the margin."""

    # --- worker process ---
    shutdown_budget_seconds: float = 100.0
    metrics_flush_seconds: float = 60.0
    metrics_namespace: str = "Streamlease"
    health_file: str = "/tmp/streamlease-worker-health"  # noqa: S108 - container-local liveness file
    health_max_age_seconds: float = 30.0
    lease_event_log: str = ""
    """If set, append lease events (acquired/renewed/fenced/released) as JSONL here, in the format
    of :mod:`streamlease.lease_events` (tests and the local stack read it)."""
    log_level: str = "INFO"
    trace_export: TraceExport = TraceExport.OFF
    """Where the worker's spans go: ``off``, ``otlp`` (the collector at
    ``trace_otlp_endpoint``; on AWS the ADOT collector beside it) or ``file`` (``trace_file``)."""
    trace_otlp_endpoint: str = "http://127.0.0.1:4318/v1/traces"
    trace_file: str = ""
    trace_sample_ratio: float = 0.05
    """Share of the acquisitions no caller's trace covers (orphans, takeovers, handoffs between
    workers) that start a trace of their own; a command's trace header decides for its own."""

    # --- control plane ---
    max_body_bytes: int = 8192
    max_url_length: int = MAX_URL_CHARS
    page_size_max: int = MAX_PAGE_SIZE
    api_url: str = ""
    """Base URL of the API for the ``streamlease`` CLI; empty: the local stack's API."""

    # --- local stack ---
    local_host: str = "127.0.0.1"
    local_moto_port: int = 5000
    local_api_port: int = 8080
    local_upstream_port: int = 8765
    local_workers: int = 3
    local_state_dir: str = ".local"
    local_auditor_seconds: float = 10.0
    """How often the local stack runs the auditor (AWS: every minute); its metrics feed the
    local dashboard."""
    local_metrics_flush_seconds: float = 5.0
    """``metrics_flush_seconds`` of the local stack's workers, so its dashboard moves while one
    watches (AWS: every minute)."""
    local_respawn_seconds: float = 2.0
    local_sink: str = "file"
    """The sink of the local stack's workers: ``file`` (JSONL per stream under ``sink_dir``:
    the dashboard, the demo and the invariant checker read it) or ``kinesis`` (the AWS default
    against moto's Kinesis, aggregated: read it with ``streamlease consume``)."""

    def __post_init__(self) -> None:
        var = env_name  # messages name the environment variables: an operator sets those

        problems = []
        positive = ("lease_seconds", "heartbeat_seconds", "reconcile_seconds", "progress_seconds")
        for name in (*positive, "table_capacity_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                problems.append(f"{var(name)} must be a positive number of seconds, got {value}")
        if self.fence_margin_seconds < 0 or self.fence_margin_seconds >= self.lease_seconds:
            problems.append(
                f"{var('fence_margin_seconds')} must be at least 0 and below {var('lease_seconds')}"
            )
        elif self.heartbeat_seconds >= self.lease_seconds - self.fence_margin_seconds:
            problems.append(
                f"{var('heartbeat_seconds')} must be shorter than {var('lease_seconds')} minus"
                f" {var('fence_margin_seconds')}, or a holder fences itself before it renews"
            )
        for name in ("clock_skew_seconds",):
            if getattr(self, name) < 0:
                problems.append(f"{var(name)} must not be negative")
        timeout = self.sink_call_timeout_seconds
        if not (math.isfinite(self.sink_timeout_seconds) and self.sink_timeout_seconds >= 0):
            problems.append(f"{var('sink_timeout_seconds')} must be 0 or a number of seconds")
        elif self.sink == "kinesis" and not 0 < 2 * timeout <= self.fence_margin_seconds:
            problems.append(
                f"with the Kinesis sink, {var('sink_timeout_seconds')} ({timeout:g} s) must be"
                f" above 0 and at most half of {var('fence_margin_seconds')}"
                f" ({self.fence_margin_seconds:g} s): a call started just before the fencing"
                " deadline may be under way for about twice its timeout, and only the margin"
                " keeps it from overlapping the next holder"
            )
        if self.local_sink not in LOCAL_SINKS:
            problems.append(f"{var('local_sink')} must be one of {', '.join(LOCAL_SINKS)}")
        for name in ("capacity", "shed_batch", "sink_max_attempts"):
            if getattr(self, name) < 1:
                problems.append(f"{var(name)} must be at least 1")
        if self.capacity > MAX_CAPACITY:
            problems.append(
                f"{var('capacity')} must be at most {MAX_CAPACITY}: a session's checkpoint vector"
                " (up to 2 slots of 20 bytes a stream) must fit one DynamoDB item"
            )
        if not 1 <= self.max_url_length <= MAX_URL_CHARS:
            problems.append(f"{var('max_url_length')} must be from 1 to {MAX_URL_CHARS}")
        if not 1 <= self.page_size_max <= MAX_PAGE_SIZE:
            problems.append(f"{var('page_size_max')} must be from 1 to {MAX_PAGE_SIZE}")
        if not 0 <= self.trace_sample_ratio <= 1:
            problems.append(f"{var('trace_sample_ratio')} must be from 0 to 1")
        if self.trace_export is TraceExport.FILE and not self.trace_file:
            problems.append(f"{var('trace_export')}=file needs {var('trace_file')}")
        if not isinstance(self.upstream_library, UpstreamLibrary):
            problems.append(
                f"{var('upstream_library')} must be one of {', '.join(UpstreamLibrary)}"
            )
        if not isinstance(self.liveness, Liveness):
            problems.append(f"{var('liveness')} must be one of {', '.join(Liveness)}")
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def sink_call_timeout_seconds(self) -> float:
        """The Kinesis sink's call timeout in force (``sink_timeout_seconds``, or half the
        fence margin when that is 0)."""
        return self.sink_timeout_seconds or self.fence_margin_seconds / 2

    @property
    def lease_ms(self) -> int:
        """Lease duration in milliseconds."""
        return int(self.lease_seconds * 1000)

    @property
    def clock_skew_ms(self) -> int:
        """Clock-skew allowance in milliseconds."""
        return int(self.clock_skew_seconds * 1000)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read settings from ``environ`` (default: the process environment).

        ``overrides`` win over the environment. Raises :class:`ConfigError` naming the variable
        for a value that does not parse or breaks a rule.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, var in _ENV_NAMES.items():
            if var in env:
                try:
                    values[name] = parse_value(env[var], _TYPES[name])
                except ValueError as exc:
                    raise ConfigError(f"{var}={env[var]!r}: {exc}") from None
        values.update(overrides)
        return cls(**values)

    def to_env(self, **overrides: Any) -> dict[str, str]:
        """These settings (plus ``overrides``) as environment variables, for a child process."""
        merged = dataclasses.replace(self, **overrides) if overrides else self
        return settings_environment({name: getattr(merged, name) for name in _ENV_NAMES})


_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


def parse_value(raw: object, kind: Any) -> Any:
    """``raw`` as a value of type ``kind``: ``bool``, ``int``, ``float``, ``str``,
    ``tuple[str, ...]`` or a ``StrEnum``.

    ``raw`` is environment text (surrounding white space ignored; booleans spelt
    ``1/true/yes/on`` or ``0/false/no/off``/empty, case-insensitive; tuples comma-separated;
    enums by value, case-insensitive), or a JSON value as CDK context holds it (a boolean, a
    number, a list). Raises ``ValueError`` saying what was expected (non-finite floats and
    fractional whole numbers included), ``TypeError`` for a ``kind`` it does not read.
    """
    text: Any = raw.strip() if isinstance(raw, str) else raw
    if kind is bool:
        if isinstance(text, bool):
            return text
        lowered = str(text).lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError("expected true or false")
    if kind is int:
        if isinstance(text, float) and not text.is_integer():
            raise ValueError("expected a whole number")
        return int(text)
    if kind is float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return value
    if kind is str:
        return raw if isinstance(raw, str) else str(raw)
    if kind == tuple[str, ...]:
        items = text if isinstance(text, list) else str(text).split(",")
        return tuple(str(item).strip() for item in items if str(item).strip())
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        try:
            return kind(str(text).lower())
        except ValueError:
            raise ValueError(f"expected one of {', '.join(kind)}") from None
    raise TypeError(f"no parser for {kind!r}")


_TYPES: Final = get_type_hints(Settings)
_ENV_NAMES: Final[Mapping[str, str]] = {
    f.name: f.metadata.get("env", ENV_PREFIX + f.name.upper()) for f in dataclasses.fields(Settings)
}
"""Field name → the environment variable that sets it (the prefixed name, or AWS's own)."""

__all__ = [
    "ENV_PREFIX",
    "SettingValue",
    "Settings",
    "UpstreamLibrary",
    "env_name",
    "parse_value",
    "render_value",
    "settings_environment",
]
