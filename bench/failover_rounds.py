"""Failover, stop and start latency, measured: the rounds of the failover section.

Three workers hold N streams. In each round the busiest worker is taken out — ``kill -9``,
``kill -9`` followed at once by the reaper (what ECS's task-stopped event triggers), SIGTERM
(graceful drain), or (our presets) a gray failure: every renewal of its lands after its client
gave up, while its peers are fine (it must hand its streams over; it is then killed) — and a
replacement is started after the streams have moved; the next round
begins once the replacement runs and its start-up reconcile is over. A stream's *unowned time*
is from the moment its holder stopped delivering (the kill; for SIGTERM its release) to the new
holder's acquisition (for the gray failure: from the moment its renewals stopped being answered
to a peer's acquisition), both read from the workers' lease events on the machine's one
monotonic clock. A round waits until every one of the victim's streams has been acquired by another
worker, as read from every worker's event log (workers added by earlier rounds included), or
until its timeout: "never" means not within that timeout. Stop latency:
``POST /streams/{id}/stop`` → the holder's ``stopped`` event. Start latency: ``POST /streams`` →
the first record in the sink. Duplicates: once a preset's run is over, the invariant checker
(:mod:`local.invariants`) reads every sink record and lease event; each stream a round moved is
matched to its takeover (the new holder's epoch) and that takeover's repeated seqs counted.

Fixed latencies that do not scale with the timers are measured beside them: a DynamoDB round
trip from this process while the fleet runs, and each replacement worker's start (process start
→ services running). :mod:`bench.failover` runs this per preset and prints the tables.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from bench.context import REFERENCE, BenchContext
from local.invariants import Report, load_records
from local.moto_process import hold_dynamodb_writes, stop_holding_writes
from local.testbed import ACCOUNT, Testbed
from local.worker_process import WorkerProcess
from streamlease import aws
from streamlease.lease_events import LeaseEvent, LeaseEventKind
from streamlease.schema import PK, Liveness, belongs_to_task, stream_key, worker_key
from streamlease.settings import Settings

KILL: Final = "kill -9"
KILL_REAPER: Final = "kill -9 + reaper"
SIGTERM: Final = "SIGTERM (drain)"
GRAY: Final = "gray failure (renewals answered late)"
STOP: Final = "stop: API call → holder stops"
START: Final = "start: API call → first message in sink"
EVENTS: Final = (KILL, KILL_REAPER, SIGTERM, GRAY, STOP, START)
TAKEOVER_MODES: Final = (KILL, KILL_REAPER, SIGTERM, GRAY)
GRAY_PRESET_LIVENESS: Final = (Liveness.SESSION, Liveness.STREAM)
"""Presets whose workers hand their streams over in a gray failure (ours); the reference design
has no such path, so it is not put through one."""
GRAY_LATE_FACTOR: Final = 1.5
"""A gray round's renewals land this many DynamoDB timeouts late (the chaos test's 1.5 s against
a 1 s timeout)."""
GRAY_REQUESTS: Final = 1_000_000
"""Hold every matching request for the whole round."""
REAPER_CALL: Final = "reaper handler call"
WORKER_START: Final = "worker start"
"""A replacement's process start → its services running (seconds)."""
STORE_ROUND_TRIP: Final = "DynamoDB round trip"
"""One consistent GetItem from this process while the fleet runs (seconds)."""
RATE: Final = 10.0
WORKERS: Final = 3
STORE_PROBES: Final = 20

Samples = dict[str, list[float]]
"""Event (or :data:`REAPER_CALL`, :data:`WORKER_START`, :data:`STORE_ROUND_TRIP`) → seconds,
NaN for "never"."""


@dataclass
class PresetRun:
    """What one preset's run measured."""

    settings: Settings
    samples: Samples
    timeout_seconds: float
    """How long a round waited for a stream before counting it "never"."""
    stop_passed_over: int = 0
    """Streams not stopped after all: the events show no holder at the call (a rebalance had
    just let go of it)."""
    duplicates: dict[str, list[int]] = field(default_factory=dict)
    """Takeover mode → repeated seqs of each stream it moved (one entry per takeover)."""
    violations: list[str] = field(default_factory=list)
    """What the invariant checker found broken over the whole run (must be none)."""


def _busiest(bed: Testbed) -> tuple[WorkerProcess, set[str]]:
    owners = bed.owners()
    live = {w.worker_id: w for w in bed.live_workers()}
    counts = {wid: sum(1 for o in owners.values() if o == wid) for wid in live}
    victim = live[max(counts, key=lambda wid: counts[wid])]
    return victim, {s for s, o in owners.items() if o == victim.worker_id}


def _first(events: Iterable[LeaseEvent], stream_id: str, after: float, **match: str) -> float:
    """``mono`` of the first event of ``stream_id`` after ``after`` matching ``match`` (NaN:
    none)."""
    times = [
        e.mono
        for e in events
        if e.stream_id == stream_id
        and e.mono >= after
        and all(getattr(e, k) == v for k, v in match.items())
    ]
    return min(times) if times else float("nan")


@dataclass(frozen=True)
class TakeoverRound:
    """One round: which worker was taken out, how and when, and what its streams went through."""

    mode: str
    victim: str
    started_mono: float
    """When the victim was killed or sent SIGTERM (monotonic seconds)."""
    unowned_seconds: dict[str, float]
    """Per stream the victim held: seconds without an owner; NaN when no other worker acquired
    it within the round's timeout."""
    new_epochs: dict[str, int] = field(default_factory=dict)
    """Per stream taken over: the epoch its new holder acquired it at."""
    replacement_start_seconds: float = math.nan
    """The replacement's process start → services running."""


def first_acquisitions(
    events: Iterable[LeaseEvent], stream_ids: Iterable[str], victim: str, after: float
) -> dict[str, LeaseEvent]:
    """Stream → its first ``acquired`` event by a worker other than ``victim`` at or after
    ``after``; streams not (yet) acquired are left out."""
    wanted = set(stream_ids)
    out: dict[str, LeaseEvent] = {}
    for e in events:
        if (
            e.event == LeaseEventKind.ACQUIRED
            and e.stream_id in wanted
            and e.worker_id != victim
            and e.mono >= after
            and (e.stream_id not in out or e.mono < out[e.stream_id].mono)
        ):
            out[e.stream_id] = e
    return out


def takeovers(
    events: Iterable[LeaseEvent], stream_ids: Iterable[str], victim: str, after: float
) -> dict[str, float]:
    """Stream → ``mono`` of its first acquisition by a worker other than ``victim`` at or after
    ``after``; streams not (yet) acquired are left out."""
    return {s: e.mono for s, e in first_acquisitions(events, stream_ids, victim, after).items()}


def takeover_round(
    bed: Testbed, mode: str, timeout: float, reaper_seconds: list[float]
) -> TakeoverRound:
    """Take the busiest worker out by ``mode``, wait until its streams are acquired elsewhere
    (read from the event logs, at most ``timeout`` seconds), then start a replacement.

    The wait is on the very events the figures are computed from: a stream is "never" taken
    over only if no other worker's log shows it acquired within ``timeout``.
    """
    victim, held = _busiest(bed)
    old = victim.worker_id
    already_read = len(bed.tail.events)  # written before t0: the round needs only later ones
    t0 = time.monotonic()
    if mode == SIGTERM:
        victim.terminate(0)
    elif mode == GRAY:
        hold_dynamodb_writes(
            bed.settings.aws_endpoint_url,
            gray_renewal_match(bed.settings, old),
            GRAY_LATE_FACTOR * bed.settings.dynamodb_timeout_seconds,
            GRAY_REQUESTS,
        )
    else:
        victim.kill()
        if mode == KILL_REAPER:
            reaper_started = time.monotonic()
            bed.reap(victim)
            reaper_seconds.append(time.monotonic() - reaper_started)

    def all_taken() -> bool:
        bed.tail.refresh()
        return len(takeovers(bed.tail.events[already_read:], held, old, t0)) == len(held)

    try:
        with contextlib.suppress(TimeoutError):  # a stream never taken over counts as "never"
            bed.wait_for(all_taken, timeout, f"{len(held)} streams of {old} acquired elsewhere")
    finally:
        if mode == GRAY:
            stop_holding_writes(bed.settings.aws_endpoint_url)
    if mode == SIGTERM:
        victim.wait(bed.settings.shutdown_budget_seconds + 5)
    elif mode == GRAY:
        victim.kill()  # it recovers once answered; the next round starts from three workers
    bed.tail.refresh()
    events = bed.tail.events[already_read:]
    acquired = first_acquisitions(events, held, old, t0)
    unowned = {}
    for stream_id in held:
        stopped_at = t0
        if mode == SIGTERM:
            released = _first(events, stream_id, t0, event="released", worker_id=old)
            stopped_at = t0 if math.isnan(released) else released
        taken = acquired.get(stream_id)
        unowned[stream_id] = (math.nan if taken is None else taken.mono) - stopped_at
    started = _replace(bed, timeout)
    epochs = {s: e.epoch for s, e in acquired.items()}
    return TakeoverRound(mode, old, t0, unowned, epochs, started)


def gray_renewal_match(settings: Settings, worker_id: str) -> list[str]:
    """What only ``worker_id``'s renewals carry: its worker item's (sessions: any of its
    sessions, whose ids continue its id), or each of its leases' (per-stream: the owner it
    names; its worker item still renews, so it stays on the fleet list)."""
    if settings.liveness is Liveness.SESSION:
        return ["UpdateItem", worker_key(worker_id), "#hb + :one"]
    return ["UpdateItem", "SET #exp = :exp, #seq = :seq", worker_id]


def _replace(bed: Testbed, timeout: float) -> float:
    """Start the victim's replacement and let its start-up reconcile pass; returns its start
    time (process start → services running; NaN: not within ``timeout``). Running into the next
    round, that reconcile would take the next victim's released streams at a moment set by
    process start-up, not by the protocol (the reference preset otherwise finds them only at its
    next reconcile, every three leases)."""
    replacement = bed.add_worker()
    try:
        bed.wait_worker_running(replacement, timeout)
        started = time.monotonic() - replacement.started_mono
    except TimeoutError:  # a slow start must not sink the run
        started = math.nan
    time.sleep(bed.settings.heartbeat_seconds)  # ample for one query and a few acquires
    return started


def _stop_latencies(bed: Testbed, count: int, timeout: float) -> tuple[list[float], int]:
    """Stop ``count`` held streams, one at a time: seconds from the API call to the holder's
    ``stopped``/``released``/``lost`` event (NaN: its holder never reacted within ``timeout``).

    Also returns how many streams were passed over because the lease events show no holder at
    the moment of the call (a rebalance had just released it): no stop latency to measure.
    """
    out: list[float] = []
    passed_over = 0
    stopped: set[str] = set()
    while len(out) < count and passed_over <= count:
        live = {w.worker_id for w in bed.live_workers()}
        held = sorted(s for s, owner in bed.owners().items() if owner in live and s not in stopped)
        if not held:
            break
        stream_id = held[0]
        stopped.add(stream_id)
        at = bed.stop_stream(stream_id)

        def ended(stream_id: str = stream_id, at: float = at) -> float:
            bed.tail.refresh()
            times = [
                _first(bed.tail.events, stream_id, at, event=kind)
                for kind in ("stopped", "released", "lost")
            ]
            return min((t for t in times if not math.isnan(t)), default=math.nan)

        def unheld(stream_id: str = stream_id, at: float = at) -> bool:
            return stream_id not in bed.owners(at)

        try:
            bed.wait_for(
                lambda: not math.isnan(ended()) or unheld(), timeout, f"stop of {stream_id}"
            )
        except TimeoutError:
            out.append(math.nan)
            continue
        if math.isnan(ended()):
            passed_over += 1
            continue
        out.append(ended() - at)
    return out, passed_over


def _start_latencies(bed: Testbed, count: int, timeout: float) -> list[float]:
    out = []
    for i in range(count):
        stream_id = f"late{i:02d}-{int(time.time() * 1000) % 100000}"
        wall_at = time.time()
        bed.start_new_stream(stream_id)
        try:
            bed.wait_for(partial(bed.first_record_after, stream_id), timeout, "first record")
        except TimeoutError:
            out.append(math.nan)
            continue
        records, _ = load_records(bed.sink_file(stream_id))
        first_ms = min(r.received_at_ms for r in records)
        out.append(first_ms / 1000 - wall_at)
    return out


def round_timeout(settings: Settings) -> float:
    """How long a round waits for a stream to move before it counts as "never" (seconds)."""
    return 3 * settings.lease_seconds + 2 * settings.reconcile_seconds + 30


def start_fleet(ctx: BenchContext, bed: Testbed, streams: int) -> list[str]:
    """Start the section's workers and ``streams`` streams; returns their ids once all are
    owned (and the reaper handler is warm)."""
    for _ in range(WORKERS):
        bed.add_worker()
    ids = bed.create_streams(streams)
    bed.wait_all_owned(ids, round_timeout(bed.settings))
    bed.reap_task(f"arn:aws:ecs:us-east-1:{ACCOUNT}:task/local/warm-up")  # not a cold start
    return ids


def run_rounds(
    ctx: BenchContext,
    bed: Testbed,
    ids: Sequence[str],
    modes: Sequence[str],
    rounds: int,
    reaper_seconds: list[float],
) -> list[TakeoverRound]:
    """``rounds`` takeover rounds of each mode in turn, each after every stream is owned again."""
    timeout = round_timeout(bed.settings)
    out = []
    for mode in modes:
        for r in range(rounds):
            ctx.progress.update(f"{mode}, round {r + 1}/{rounds}", force=True)
            out.append(takeover_round(bed, mode, timeout, reaper_seconds))
            with contextlib.suppress(TimeoutError):  # the next round measures what moves
                bed.wait_all_owned(ids, timeout)
    return out


def duplicates_by_mode(report: Report, rounds: Iterable[TakeoverRound]) -> dict[str, list[int]]:
    """Mode → repeated seqs of every takeover a round caused: per stream the round moved, the
    checker's takeover from the victim into the epoch its new holder acquired (found by that
    epoch, so an earlier move of the same stream is never counted)."""
    out: dict[str, list[int]] = {}
    for r in rounds:
        counts = out.setdefault(r.mode, [])
        for stream_id, epoch in r.new_epochs.items():
            stream = report.streams.get(stream_id)
            if stream is None:
                continue
            counts += [
                t.duplicates
                for t in stream.takeovers
                if t.to_epoch == epoch and belongs_to_task(t.from_worker, r.victim)
            ]
    return out


def store_round_trips(settings: Settings, stream_id: str, count: int) -> list[float]:
    """``count`` consistent GetItems of one stream item from this process, spaced 50 ms
    (seconds each): the store's latency as the workers see it while they run."""
    client = aws.client("dynamodb", settings, max_attempts=1)
    out = []
    for _ in range(count):
        sent = time.monotonic()
        client.get_item(
            TableName=settings.table_name,
            Key={PK: {"S": stream_key(stream_id)}},
            ConsistentRead=True,
        )
        out.append(time.monotonic() - sent)
        time.sleep(0.05)
    return out


def _gray_applies(preset: str, settings: Settings) -> bool:
    return preset != REFERENCE and settings.liveness in GRAY_PRESET_LIVENESS


def measure(ctx: BenchContext, preset: str) -> PresetRun:
    """Every latency and the duplicates for one preset (see the module docstring)."""
    settings = ctx.settings(preset)
    streams = 12 if ctx.quick else 30
    rounds = 1 if ctx.quick else 2
    samples: Samples = {e: [] for e in (*EVENTS, REAPER_CALL, WORKER_START, STORE_ROUND_TRIP)}
    timeout = round_timeout(settings)
    with ctx.testbed(f"failover-{preset}", settings, rate=RATE) as bed:
        ids = start_fleet(ctx, bed, streams)
        samples[STORE_ROUND_TRIP] = store_round_trips(bed.settings, ids[0], STORE_PROBES)
        modes = [m for m in TAKEOVER_MODES if m != GRAY or _gray_applies(preset, settings)]
        done = run_rounds(ctx, bed, ids, modes, rounds, samples[REAPER_CALL])
        for measured in done:
            samples[measured.mode] += list(measured.unowned_seconds.values())
            samples[WORKER_START].append(measured.replacement_start_seconds)
        ctx.progress.update(f"{preset}: stop and start latency", force=True)
        samples[STOP], passed_over = _stop_latencies(bed, 3 if ctx.quick else 8, timeout)
        samples[START] = _start_latencies(bed, 3 if ctx.quick else 8, timeout)
        ctx.progress.update(f"{preset}: checking sink records and lease events", force=True)
        report = bed.report()
    return PresetRun(
        bed.settings,
        samples,
        timeout,
        passed_over,
        duplicates_by_mode(report, done),
        report.violations(),
    )
