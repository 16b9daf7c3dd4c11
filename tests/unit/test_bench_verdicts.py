"""The benchmark's pure rules: what each preset runs, and when a scale step counts as on time.

Nothing here measures anything; these are the definitions the tables are printed by.
"""

from __future__ import annotations

import dataclasses

import pytest

from bench import scale
from bench.context import PER_STREAM, REFERENCE, SESSIONS, preset_settings
from bench.worker_scale import Window
from streamlease.schema import Liveness
from streamlease.settings import Settings

HEARTBEAT_SECONDS = 5.0


def window(**changes: object) -> Window:
    """One calm 20 s window at 1,000 streams: renewals on time, 5 % of a core."""
    calm = Window(
        cpu_seconds=1.0,
        messages=0,
        renewals=4,
        lag_p50s=[0.2],
        lag_p99s=[0.5],
        lag_max=0.5,
        call_p50s=[8.0],
        call_p99s=[12.0],
        leases_lost=0,
        held_at_end=1000,
        seconds=20.0,
        held_min=1000,
        other_cpu_seconds={scale.SIMULATOR: 0.2, scale.MOTO: 2.0},
    )
    return dataclasses.replace(calm, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("preset", "liveness"),
    [(SESSIONS, Liveness.SESSION), (PER_STREAM, Liveness.STREAM), (REFERENCE, Liveness.STREAM)],
)
def test_every_preset_sets_its_liveness_mode_explicitly(preset: str, liveness: Liveness) -> None:
    """Whatever the default, a preset runs the mode its label says."""
    other_default = dataclasses.replace(Settings(), liveness=Liveness.STREAM)
    assert preset_settings(preset, other_default).liveness is liveness
    assert preset_settings(preset, Settings()).liveness is liveness


def test_the_reference_preset_is_per_stream_with_the_seeds_slow_paths() -> None:
    """Reconcile every three leases, no handoff on release, no suspects scheduled."""
    ours = Settings()
    reference = preset_settings(REFERENCE, ours)
    assert reference.reconcile_seconds == 3 * ours.lease_seconds
    assert not reference.handoff_on_release
    assert not reference.schedule_suspects
    assert preset_settings(PER_STREAM, ours).reconcile_seconds == ours.reconcile_seconds


def test_a_calm_window_is_on_time() -> None:
    assert scale.lateness(window(), HEARTBEAT_SECONDS) == ""


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"lag_max": 5000.0}, "sent 5,000 ms late"),
        ({"call_p99s": [6000.0]}, "round trip p99 6,000 ms"),
        ({"leases_lost": 3}, "3 leases lost"),
        ({"sessions_expired": 1}, "session expired"),
    ],
)
def test_a_renewal_a_heartbeat_late_or_anything_fenced_is_not_on_time(
    changes: dict[str, object], reason: str
) -> None:
    assert reason in scale.lateness(window(**changes), HEARTBEAT_SECONDS)


def test_a_late_step_is_blamed_on_the_worker_when_it_used_a_whole_core() -> None:
    late = window(lag_max=6000.0, cpu_seconds=19.0)
    step = scale.Step(1000, late, on_time=False, failure="late")
    assert "worker's CPU" in scale.bound_of(step, HEARTBEAT_SECONDS, "")


def test_a_late_step_is_blamed_on_the_store_when_moto_is_busy_on_its_core() -> None:
    late = window(lag_max=5200.0, other_cpu_seconds={scale.SIMULATOR: 0.2, scale.MOTO: 15.0})
    step = scale.Step(1000, late, on_time=False, failure="late")
    assert "the store" in scale.bound_of(step, HEARTBEAT_SECONDS, "")


def test_a_late_step_is_blamed_on_the_store_when_its_round_trips_are_slow() -> None:
    late = window(call_p99s=[6000.0])
    step = scale.Step(1000, late, on_time=False, failure="late")
    assert "store" in scale.bound_of(step, HEARTBEAT_SECONDS, "")


def test_a_step_never_held_for_lack_of_file_descriptors_says_so() -> None:
    step = scale.Step(9000, None, on_time=False, failure="worker held 8,100 of 9,000 streams")
    assert "file descriptors" in scale.bound_of(step, HEARTBEAT_SECONDS, "OSError: [Errno 24]")


def test_cpu_per_stream_second_divides_by_the_streams_held_and_the_window() -> None:
    """1 s of CPU over 20 s at 1,000 streams: 50 µs per stream-second."""
    assert scale.us_per_stream_second(window()) == pytest.approx(50.0)


def test_idle_cost_tells_the_workers_own_cpu_from_each_streams() -> None:
    """1,000 streams take 2 % of a core and 5,000 take 6 %: 1 % is the worker's whatever it
    holds, each stream adds 10 µs per second, and 10,000 take 11 %."""
    small = window(held_min=1000, cpu_seconds=0.8, seconds=40.0)
    large = window(held_min=5000, cpu_seconds=2.4, seconds=40.0)
    cost = scale.idle_cost([small, large])
    assert cost is not None and cost.fitted
    assert cost.fixed == pytest.approx(0.01)
    assert cost.per_stream * 1e6 == pytest.approx(10.0)
    assert cost.share_of_core(10_000) == pytest.approx(0.11)


def test_idle_cost_of_one_window_is_its_average() -> None:
    cost = scale.idle_cost([window(held_min=500, cpu_seconds=1.0, seconds=20.0)])
    assert cost is not None and not cost.fitted
    assert cost.per_stream * 1e6 == pytest.approx(100.0)
    assert scale.idle_cost([]) is None
