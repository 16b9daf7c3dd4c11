"""The rebalancer's round (architecture §10): it sheds only while its session is healthy."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from streamlease.schema import Liveness
from worker.liveness.fleet import DIGEST_READ_ROUNDS, digest_due
from worker.ownership.end_reason import EndReason
from worker.ownership.fleet_view import FleetView, wants_handoffs
from worker.ownership.rebalancer import Rebalancer


@dataclass
class Holder:
    stream_id: str
    acquired_mono: float = 0.0
    is_active: bool = True
    ended: list[EndReason] = field(default_factory=list)

    def request_end(self, reason: EndReason) -> None:
        self.ended.append(reason)


class Holdings(list[Holder]):
    capacity = 100
    load = SimpleNamespace(total=lambda: None, loads=dict)

    def note_given_away(self, stream_id: str) -> None:
        pass


class Session:
    def __init__(self, healthy: bool) -> None:
        self._healthy = healthy

    def healthy(self, now_mono: float | None = None) -> bool:
        return self._healthy


def _round(session: Session | None, held: int = 10, view: FleetView | None = None) -> list[str]:
    """One round of a worker holding ``held`` streams, by counts (no load figures); by
    default the share is 5 and the other worker lacks 5."""
    settings = SimpleNamespace(
        shed_batch=50,
        liveness=Liveness.SESSION,
        min_tenure_seconds=0.0,
        rebalance_slack=1,
        rebalance_seconds=0.0,
    )
    ctx = SimpleNamespace(
        settings=settings,
        session=session,
        shutdown_requested=asyncio.Event(),
        table_write_units=4000,
    )
    holdings = Holdings(Holder(f"s{i}") for i in range(held))
    if view is None:
        view = FleetView(share=5, live_workers=2, total_streams=10, deficit=5, surplus=5)
    rebalancer = Rebalancer(cast(Any, ctx), cast(Any, holdings), view)
    chosen = asyncio.run(rebalancer.rebalance_once())
    assert [h.stream_id for h in holdings if h.ended] == sorted(chosen, key=lambda s: int(s[1:]))
    return chosen


def test_a_worker_above_its_share_sheds_while_its_session_is_healthy() -> None:
    assert _round(Session(healthy=True))
    assert _round(None), "per-stream leases: no session to ask"


def test_a_worker_whose_session_lags_sheds_nothing() -> None:
    """Fenced, or renewals a heartbeat behind (a DynamoDB brownout): a release would likely go
    unanswered, and the stream would wait to be found instead of being handed over."""
    assert _round(Session(healthy=False)) == []


def test_a_worker_one_over_its_share_sheds_only_while_it_is_shedding() -> None:
    """Hysteresis by rounds: at rest, one stream over the share moves nothing (a recount a
    stream off must not start moves); a worker whose recent rounds shed goes on down to the
    share, and its rounds say so until some in a row move nothing."""
    at_rest = FleetView(share=5, live_workers=2, total_streams=10, deficit=1, surplus=0)
    assert _round(Session(healthy=True), held=6, view=at_rest) == []
    assert not at_rest.shedding
    shedding = FleetView(
        share=5, live_workers=2, total_streams=10, deficit=1, surplus=0, shed_idle_rounds=1
    )
    assert len(_round(Session(healthy=True), held=6, view=shedding)) == 1
    assert shedding.shed_idle_rounds == 0
    for _ in range(3):
        assert _round(Session(healthy=True), held=5, view=shedding) == []
    assert not shedding.shedding, "three rounds in a row moved nothing"


def test_takers_fill_to_the_lower_of_the_last_two_counts_rounded_down() -> None:
    """Rebalance handoffs go to workers below the streams over the workers, rounded down, as
    the lower of the last two counts: a count a few streams high while streams move would
    let takers fill past the share they learn of next, and a stream taken stays its tenure."""
    view = FleetView()
    view.recount(1_000_000, 1250)
    assert (view.share, view.taking_share) == (800, 800)
    view.recount(1_000_006, 1250)  # six streams in flight counted twice
    assert (view.share, view.taking_share) == (801, 800)
    view.recount(1_002_500, 1250)
    assert view.taking_share == 800, "a high count once is not trusted"
    view.recount(1_002_500, 1250)
    assert view.taking_share == 802, "twice it is"
    assert wants_handoffs(view, 801, None)
    assert not wants_handoffs(view, 802, None)


def test_a_shedding_worker_of_a_large_fleet_reads_the_digest_every_round() -> None:
    """At rest every few rounds (a fleet at rest pays for that cadence only); while it sheds,
    every round, so it stops on the share as the moves change it."""
    every = DIGEST_READ_ROUNDS
    assert [digest_due(n, shedding=False) for n in range(1, every + 1)] == [False] * (every - 1) + [
        True
    ]
    assert all(digest_due(n, shedding=True) for n in range(1, every + 1))
