"""The worker's load meter: per-stream decayed rates from the holders' counters, and CPU use."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from worker.ownership.load_meter import LoadMeter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.cpu = 0.0

    def mono(self) -> float:
        return self.now

    def process(self) -> float:
        return self.cpu


def holder(stream_id: str, epoch: int = 1) -> Any:
    return SimpleNamespace(
        stream_id=stream_id,
        epoch=epoch,
        is_active=True,
        progress=SimpleNamespace(received=0, received_bytes=0),
    )


def test_a_streams_load_is_its_messages_and_kibibytes_per_second() -> None:
    clock = Clock()
    held = [holder("a"), holder("b")]
    meter = LoadMeter(lambda: cast(Any, held), clock=clock.mono, cpu_clock=clock.process)
    assert meter.renewal_figures() == (0, None), "nothing received yet"
    for _ in range(6):
        clock.now += 5.0
        clock.cpu += 1.0
        held[0].progress.received += 50  # 10 messages a second
        held[0].progress.received_bytes += 50 * 1024  # 10 KiB a second
        meter.sample()
    assert meter.stream_load("a") == pytest.approx(20.0, rel=0.1)  # sampled per heartbeat
    assert meter.stream_load("b") == 0.0
    load_milli, cpu_permille = meter.renewal_figures()
    assert load_milli == pytest.approx(20_000, rel=0.1)
    assert cpu_permille == 200, "one CPU second per five seconds"


def test_a_new_holding_of_the_same_stream_starts_afresh_or_from_its_handoff() -> None:
    clock = Clock()
    held = [holder("a", epoch=1)]
    meter = LoadMeter(lambda: cast(Any, held), clock=clock.mono, cpu_clock=clock.process)
    meter.sample()
    clock.now += 5.0
    held[0].progress.received += 500
    meter.sample()
    assert meter.stream_load("a") > 50
    held[0] = holder("a", epoch=2)
    meter.seed("a", 7.0)
    meter.sample()
    assert meter.stream_load("a") == pytest.approx(7.0)


def test_a_stream_no_longer_held_drops_out_of_the_total() -> None:
    clock = Clock()
    held = [holder("a")]
    meter = LoadMeter(lambda: cast(Any, held), clock=clock.mono, cpu_clock=clock.process)
    meter.sample()
    clock.now += 5.0
    held[0].progress.received += 100
    meter.sample()
    held.clear()
    meter.sample()
    assert meter.total() == 0.0
