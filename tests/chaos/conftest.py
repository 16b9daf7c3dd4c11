"""Chaos suite fixtures: a scaled-down fleet (3 workers, 15 streams) and the invariant verdict.

Every scenario runs real ``python -m worker`` processes against the session's serialised moto
server and an upstream simulator, with every timer at a tenth of production (lease 2 s,
heartbeat 0.5 s, reconcile 0.5 s), injects its faults, then hands the workers' lease events and
the sink's records to :mod:`local.invariants`. Every scenario runs twice: with sessions (the
default) and with per-stream leases. A failing scenario prints the checker's report and the
tail of each worker's log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos_support import LEASE_SECONDS, RATE, STREAMS

from local.testbed import Testbed
from local.worker_process import scaled_settings
from streamlease.schema import Liveness
from streamlease.settings import Settings


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: fault-injection scenario over real worker processes (part of make test)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every scenario is ``serial``: its fleet runs on shrunk timers, alone on the machine."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(params=[Liveness.SESSION, Liveness.STREAM], ids=["sessions", "per-stream"])
def liveness(request: pytest.FixtureRequest) -> Liveness:
    """The liveness mode the fleet of this run uses."""
    mode: Liveness = request.param
    return mode


@pytest.fixture
def chaos_settings(aws_settings: Settings, liveness: Liveness) -> Settings:
    """Fresh resources, timers at a tenth of production, capacity for the whole set twice.

    Two timers stay longer than a tenth: DynamoDB calls may take 1 s (a loaded two-core machine
    runs the moto server too), and a drain gets 20 s (its exit reserve is not scaled).
    """
    return scaled_settings(
        aws_settings,
        liveness=liveness,
        lease_seconds=LEASE_SECONDS,
        capacity=2 * STREAMS,
        metrics_flush_seconds=600.0,
        dynamodb_timeout_seconds=1.0,
        shutdown_budget_seconds=20.0,
    )


@pytest.fixture
def bed(chaos_settings: Settings, tmp_path: Path) -> Iterator[Testbed]:
    """An empty testbed (upstream simulator + API); the scenario adds workers and streams."""
    with Testbed(chaos_settings, tmp_path / "run", rate=RATE) as testbed:
        yield testbed
