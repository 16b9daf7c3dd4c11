"""The fleet model's tables: the goals at the largest fleet, steady state per fleet, events per
fleet, and the model itself (its measured request units and its limits)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from bench.common import Table
from bench.fleet_model.scenarios import (
    CAPACITY_HEADROOM,
    DEPLOY_WAVE_FRACTION,
    DEPLOY_WAVES,
    INDEX_PARTITIONS,
    OBSERVERS,
    SCALE_OUT_FRACTION,
    STEADY_SECONDS,
    TABLE_PARTITIONS,
    Outcome,
    Size,
)
from bench.fleet_model.store import READ_LIMIT, WRITE_LIMIT, Load
from bench.fleet_model.world import RTT_SECONDS, Design
from streamlease import rules
from streamlease.settings import Settings

COST_GOAL: Final = 1.2
HOT_GOAL: Final = 0.5
AZ_GOAL_LEASES: Final = 3.0
EVENT_NAMES: Final = {
    "kill": "one worker killed",
    "az": "a zone lost (a third of the workers)",
    "deploy": f"rolling deploy ({DEPLOY_WAVES} waves of {DEPLOY_WAVE_FRACTION:.0%})",
    "scale_out": f"scale-out (+{SCALE_OUT_FRACTION:.0%} workers)",
}


def _find(outcomes: Sequence[Outcome], design: str, size: Size, scenario: str) -> Outcome | None:
    return next(
        (o for o in outcomes if (o.design, o.size, o.scenario) == (design, size, scenario)), None
    )


def _verdict(ok: bool) -> str:
    return "met" if ok else "not met"


def _hot(load: Load | None) -> str:
    return "–" if load is None else load.describe()


def recovery(o: Outcome | None, cap: float | None = None) -> str:
    """``0.97 leases``, or ``> 15 leases (≈ 80 at that pace)``."""
    if o is None:
        return "–"
    if o.recovery_leases is not None:
        return f"{o.recovery_leases:.2f} leases"
    limit = f"> {cap:g} leases" if cap else "not within the cap"
    if o.projected_leases is not None and math.isfinite(o.projected_leases):
        return f"{limit} (≈ {o.projected_leases:.0f} at that pace)"
    return limit


def goals_table(outcomes: Sequence[Outcome], size: Size, small: Size) -> Table:
    """The goals at ``size``, today's design beside the flat one."""
    lease = Settings().lease_seconds
    reread = Settings().fleet_recount_seconds / lease
    table = Table(
        f"Fleet model: the goals at {size.label()} streams (production timers, lease {lease:g} s)",
        ["at " + size.label(), "today", "flat", "goal", "flat: verdict"],
    )

    def cost(design: str) -> tuple[str, float]:
        big, ref = _find(outcomes, design, size, "steady"), _find(outcomes, design, small, "steady")
        if big is None or ref is None or not ref.micro_dollars:
            return "–", math.inf
        ratio = big.micro_dollars / ref.micro_dollars
        return f"{big.micro_dollars:.2f} µ$ = {ratio:.2f}× its {small.label()} figure", ratio

    today_cost, _ = cost("today")
    flat_cost, ratio = cost("flat")
    table.add(
        "DynamoDB cost per stream-hour, steady",
        today_cost,
        flat_cost,
        f"≤ {COST_GOAL:g}× the {small.label()} figure",
        _verdict(ratio <= COST_GOAL),
    )
    steady = {d: _find(outcomes, d, size, "steady") for d in ("today", "flat")}
    flat_hot = steady["flat"].steady_hottest if steady["flat"] else None
    table.add(
        "hottest partition (table or index), steady",
        _hot(steady["today"].steady_hottest if steady["today"] else None),
        _hot(flat_hot),
        f"≤ {HOT_GOAL:.0%} of its limit",
        _verdict(flat_hot is not None and flat_hot.fraction <= HOT_GOAL),
    )
    az = {d: _find(outcomes, d, size, "az") for d in ("today", "flat")}
    flat_az = az["flat"]
    table.add(
        "zone lost (a third of the workers): every stream owned again",
        recovery(az["today"]),
        recovery(flat_az),
        f"≤ {AZ_GOAL_LEASES:g} leases",
        _verdict(flat_az is not None and (flat_az.recovery_leases or math.inf) <= AZ_GOAL_LEASES),
    )
    kill = {d: _find(outcomes, d, size, "kill") for d in ("today", "flat")}
    bound = 1.1 + reread
    flat_kill = kill["flat"]
    table.add(
        "one worker killed: its streams owned again",
        recovery(kill["today"]),
        recovery(flat_kill),
        f"≤ 1.1 leases + re-read = {bound:.2f}",
        _verdict(flat_kill is not None and (flat_kill.recovery_leases or math.inf) <= bound),
    )
    per_minute = 60 / STEADY_SECONDS
    table.add(
        "throttled requests in steady state, per minute",
        f"{steady['today'].steady_throttled * per_minute:,.0f}" if steady["today"] else "–",
        f"{steady['flat'].steady_throttled * per_minute:,.0f}" if steady["flat"] else "–",
        "0",
        _verdict(steady["flat"] is not None and steady["flat"].steady_throttled == 0),
    )
    table.notes.append(
        "Cost: DynamoDB on demand (writes $0.625, reads $0.125 per million units) in µ$ per"
        " stream-hour over a steady minute, every request of every worker and the auditor's"
        " minute included. Events: from the moment of the event until the last stream is owned"
        " by a live worker again (the model's own clock), no reaper (peers only)."
    )
    return table


def steady_table(outcomes: Sequence[Outcome]) -> Table:
    """Steady state per fleet and design."""
    table = Table(
        "Fleet model: steady state per fleet (a minute at production timers)",
        [
            "fleet (workers × streams each)",
            "design",
            "µ$ / stream-h",
            "$ / month per 1,000 streams",
            "write units / stream-h",
            "read units / stream-h",
            "busiest partition-second",
            "throttled / min",
        ],
    )
    for o in outcomes:
        if o.scenario != "steady":
            continue
        table.add(
            o.size.label(),
            o.design,
            o.micro_dollars,
            o.micro_dollars * 730 * 1000 / 1e6,
            o.write_units,
            o.read_units,
            _hot(o.steady_hottest),
            round(o.steady_throttled * 60 / STEADY_SECONDS),
        )
    table.notes.append(
        "Busiest partition-second: the largest offered load (every attempt's units, throttled"
        f" ones included) on one partition in one second, against {WRITE_LIMIT:,.0f} write or"
        f" {READ_LIMIT:,.0f} read units; above 100 % it throttled."
    )
    return table


def scenario_table(outcomes: Sequence[Outcome], scenarios: Sequence[str], cap: float) -> Table:
    """Events per fleet and design."""
    table = Table(
        "Fleet model: events (time until every stream is owned again, in leases)",
        [
            "fleet",
            "event",
            "today",
            "flat",
            "streams unowned at most (today / flat)",
            "throttled (today / flat)",
            "busiest partition-second (today / flat)",
        ],
    )
    sizes = sorted({o.size for o in outcomes}, key=lambda s: (s.workers, s.per_worker))
    for size in sizes:
        for scenario in scenarios:
            today, flat = (_find(outcomes, d, size, scenario) for d in ("today", "flat"))
            if today is None and flat is None:
                continue
            table.add(
                size.label(),
                EVENT_NAMES[scenario],
                recovery(today, cap),
                recovery(flat, cap),
                " / ".join(f"{o.peak_unowned:,}" if o else "–" for o in (today, flat)),
                " / ".join(f"{o.event_throttled:,.0f}" if o else "–" for o in (today, flat)),
                " / ".join(_hot(o.event_hottest if o else None) for o in (today, flat)),
            )
    table.notes += [
        "Rolling deploy: a wave's new tasks start, then as many old ones drain (SIGTERM);"
        " the figure is the slowest wave, from its SIGTERMs. Scale-out: until no worker holds"
        " more than its share + slack (the rebalancer moves a few streams per round by design);"
        " other events: until the last stream is owned again.",
        "Not within the cap: the model stopped following the event; at the pace it had"
        " reached, recovery would take about the projected leases.",
    ]
    longest = [
        f"{o.size.label()} {o.longest_handoff:.1f} s"
        for o in outcomes
        if o.design == "flat" and o.scenario == "scale_out" and o.longest_handoff is not None
    ]
    if longest:
        table.notes.append(
            "Scale-out, flat: the longest any stream stayed unowned between its giver's release"
            " and a taker's acquire (one still unowned at the end counts to the end): "
            + ", ".join(longest)
            + "."
        )
    return table


def _units(units: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(units.items())) or "–"


def model_notes(today: Design, flat: Design, seconds: float, quick: bool) -> Table:
    """The request units measured, and what the model assumes."""
    table = Table(
        "Fleet model: write units per request, measured on the moto server (today / flat)",
        ["request", "today's layout", "flat layout"],
    )
    for name in ("acquire", "release", "take_from", "release_for", "connection"):
        table.add(name, _units(getattr(today.units, name)), _units(getattr(flat.units, name)))
    u = flat.units
    table.add(
        "session renewal",
        f"table per started KB of {u.session_base_bytes:.0f} B + {u.vector_bytes_per_stream:.1f}"
        " B per held stream; " + _units(today.units.renewal_index),
        _units(u.renewal_index),
    )
    table.notes += [
        f"Read sizes (DynamoDB's rule): a fleet-index entry {u.fleet_entry_bytes:.0f} B, a"
        f" by-owner entry {u.owner_entry_bytes:.0f} B, an orphan-index entry"
        f" {today.units.orphan_entry_bytes:.0f} B today / {u.orphan_entry_bytes:.0f} B flat, the"
        f" digest {u.digest_bytes:.0f} B; a query or scan costs half a unit per started 4 KB of"
        " what it reads (at least half), 1 MB per page.",
        "The simulation: every worker process runs the worker's loops with its timers and"
        " jitter (session renewal every heartbeat, fleet reads every second, its own streams"
        " every heartbeat, reconcile, the command poll, rebalance, drain) and decides with the"
        " worker's rules (streamlease.rules' dead-session detector and fair share,"
        " worker.ownership.fleet_view, worker.ownership.reconciler.room_for, the takeover's steps"
        " and constants)."
        f" Round trips {RTT_SECONDS[0] * 1000:g}–{RTT_SECONDS[1] * 1000:g} ms; botocore's"
        " standard retries (3 attempts, full-jitter backoff) on throttling; a worker's"
        f" capacity is {CAPACITY_HEADROOM:g}× what it holds (a zone's loss needs 1.5×).",
        "The store: per partition and second 1,000 write and 3,000 read units, for the table"
        " and for each index; a write whose index partition is full is throttled whole (the"
        f" index's back-pressure on the table). The table and each index have"
        f" {TABLE_PARTITIONS} and {INDEX_PARTITIONS} partitions (pre-warmed for 40,000 units a"
        " second); all entries of one partition key value sit in one partition.",
        "Limits: no split for heat or adaptive capacity (DynamoDB may split a hot partition"
        " over minutes; it cannot split entries that share their keys, like today's free streams"
        " at expiry 0); an on-demand table that was not pre-warmed throttles beyond twice its"
        " previous peak, which the model leaves out; the reaper's fast path is left out (peers"
        " only); SQS delivers in 20 ms and never throttles; clocks agree; the streams'"
        " upstreams connect at once. Today's design at more than"
        f" {OBSERVERS} workers runs its dead-session detector in {OBSERVERS} sampled workers"
        " (every worker still sends its reads; a sampled worker's tombstone attempt counts for"
        " the workers it stands for): reading every worker every second is what cannot scale,"
        " in the store and in the model alike.",
        f"Flat design: fleets above {rules.FULL_READ_MAX_SESSIONS} sessions watch a window of"
        f" {rules.WATCH_PEERS}+ live peers and read the digest; orphans in {flat.orphan_shards}"
        f" shards, scanned in segments; a takeover short of room waits {flat.settle_seconds:g} s"
        " once for the digest.",
        f"Model run time {seconds:.0f} s{' (--quick: fewer fleets and events)' if quick else ''}.",
    ]
    return table
