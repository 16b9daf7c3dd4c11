"""The benchmark's pure rules: what each preset runs, and when a scale step counts as on time.

Nothing here measures anything; these are the definitions the tables are printed by.
"""

from __future__ import annotations

import dataclasses

import pytest

from bench import rebalance, scale
from bench.context import PER_STREAM, REFERENCE, SESSIONS, preset_settings
from bench.worker_scale import Window
from streamlease.lease_events import LeaseEvent, LeaseEventKind
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


# --- rebalance: moves per scale-out event ---------------------------------------------------


def lease_event(
    kind: LeaseEventKind, stream_id: str, epoch: int, worker_id: str, mono: float
) -> LeaseEvent:
    return LeaseEvent(kind, stream_id, epoch, worker_id, mono)


def test_a_move_is_a_release_paired_with_the_next_epochs_acquisition_by_another_worker():
    """Releases after the join count, each paired with its stream's next epoch, even when the
    acquirer logged first (its clock read came before the releaser's answer); a release before
    the join, one nobody acquired yet and one its own worker took back are not moves."""
    released, acquired = LeaseEventKind.RELEASED, LeaseEventKind.ACQUIRED
    events = [
        lease_event(released, "old", 1, "a", 1.0),
        lease_event(acquired, "old", 2, "b", 1.5),
        lease_event(acquired, "s1", 1, "a", 0.5),
        lease_event(released, "s1", 1, "a", 11.0),
        lease_event(acquired, "s1", 3, "b", 20.0),  # a later move's, not this one's
        lease_event(acquired, "s1", 2, "new", 11.2),
        lease_event(acquired, "s2", 5, "c", 11.9),  # logged before the release's answer
        lease_event(released, "s2", 4, "b", 12.0),
        lease_event(released, "s3", 1, "a", 13.0),  # not yet acquired again
        lease_event(released, "s4", 1, "a", 14.0),
        lease_event(acquired, "s4", 2, "a", 14.5),  # taken back by its own worker
    ]
    assert rebalance.moves_after(events, 10.0) == [
        rebalance.Move("s1", "a", "new", 11.0, 11.2),
        rebalance.Move("s2", "b", "c", 12.0, 11.9),
    ]


@pytest.mark.parametrize(
    ("held", "workers", "excess"),
    [
        ([20, 20], 3, 12),  # share 14
        ([10, 10, 10], 4, 6),  # share 8
        ([14, 13, 13], 4, 10),  # share 10
        ([12, 9, 9], 4, 6),  # share 8: an uneven start
        ([3, 3], 3, 2),  # share 2
        ([], 3, 0),
    ],
)
def test_excess_over_fair_share_is_what_the_old_workers_hold_above_the_new_share(
    held, workers, excess
):
    """The least a scale-out must move: sum of max(0, held − ceil(total / workers))."""
    assert rebalance.excess_over_share(held, workers) == excess


def test_a_scale_out_counts_moves_to_the_new_worker_apart_from_wasted_ones():
    """Moves to the worker that joined are the useful ones; settled after = join → last move."""
    event = rebalance.ScaleOut(
        workers_before=2,
        held_before={"a": 7, "b": 5},
        new_worker="new",
        joined_mono=100.0,
        moves=[
            rebalance.Move("s1", "a", "new", 101.0, 101.1),
            rebalance.Move("s2", "a", "b", 102.0, 103.5),
            rebalance.Move("s3", "b", "new.2", 104.0, 104.2),  # its second session
        ],
    )
    assert (event.streams, event.excess, event.to_new) == (12, 4, 2)  # share 4
    assert event.settled_seconds == pytest.approx(4.2)
