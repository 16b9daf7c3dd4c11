"""The rebalancer's round (architecture §10): it sheds only while its session is healthy."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from streamlease.schema import Liveness
from worker.ownership.end_reason import EndReason
from worker.ownership.fleet_view import FleetView
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


def _round(session: Session | None) -> list[str]:
    """One round of a worker holding 10 streams where the share is 5 and the other worker
    lacks 5 (by counts: no load figures)."""
    settings = SimpleNamespace(
        shed_batch=50,
        liveness=Liveness.SESSION,
        min_tenure_seconds=0.0,
        rebalance_slack=1,
        rebalance_seconds=0.0,
    )
    ctx = SimpleNamespace(settings=settings, session=session, shutdown_requested=asyncio.Event())
    holdings = Holdings(Holder(f"s{i}") for i in range(10))
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
