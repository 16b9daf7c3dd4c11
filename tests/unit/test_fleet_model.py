"""The fleet model's pieces: the partition store's admission, and small fleets played end to
end (what the bench section's tables rest on)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.fleet_model import study
from bench.fleet_model.scenarios import Size, run
from bench.fleet_model.store import Store, Touch
from bench.fleet_model.units import NOMINAL_UNITS, read_units
from bench.fleet_model.world import Design, FreeIndex

UNITS = NOMINAL_UNITS
FLAT = Design("flat", "flat", "orphans", 32, ring_watch=True, units=UNITS, settle_seconds=2.0)
TODAY = Design(
    "today",
    "today",
    "orphans",
    1,
    ring_watch=False,
    units=dataclasses.replace(
        UNITS,
        acquire={"table": 1, "orphans": 2, "by-owner": 1},
        take_from={"table": 1, "orphans": 2, "by-owner": 2},
    ),
)


def test_a_write_whose_index_partition_is_full_is_throttled_whole() -> None:
    """The index's back-pressure: the table partition has room, the write is refused anyway
    and charged nowhere."""
    store = Store(table_partitions=4, index_partitions=4)
    hot = Touch("idx", 0, True, 1000.0)
    assert store.attempt(0.5, [hot])
    write = [Touch("table", 1, True, 1.0), Touch("idx", 0, True, 1.0)]
    assert not store.attempt(0.6, write)
    assert store.units(0, 1) == {("idx", True): 1000.0}
    assert store.throttled(0, 1) == 1
    assert store.attempt(1.0, write), "a new second, a new budget"


def test_the_busiest_partition_counts_what_was_offered_not_only_what_got_in() -> None:
    store = Store(table_partitions=1, index_partitions=1)
    for _ in range(3):
        store.attempt(0.0, [Touch("fleet", 0, False, 1500.0)])
    load = store.hottest(0, 1)
    assert (load.component, load.write, load.fraction) == ("fleet", False, 1.5)


def test_reads_cost_half_a_unit_per_started_4kb() -> None:
    assert read_units(0) == read_units(4096) == 0.5
    assert read_units(4097) == 1.0


def test_every_reader_of_an_orphan_partition_sees_the_same_first_streams() -> None:
    """Free streams share their index key: readers contend for the head of the partition."""
    free = FreeIndex(shards=1)
    for s in range(500):
        free.add(s)
    assert free.first([0], 10) == free.first([0], 10)
    free.discard(free.first([0], 1)[0])
    assert free.count() == 499


def test_a_small_fleet_owns_a_killed_workers_streams_again_within_about_a_lease() -> None:
    """Detection takes most of a lease (the renewal before the kill started it); the
    takeover a moment."""
    for design in (TODAY, FLAT):
        outcome = run(design, Size(4, 50), "kill", cap_leases=3)
        assert outcome.recovery_leases is not None, design.key
        assert 0.5 < outcome.recovery_leases < 1.2, design.key
        assert outcome.peak_unowned == 50


def test_a_large_fleet_reading_everyone_throttles_where_the_ring_does_not() -> None:
    """Above a few hundred workers the whole-fleet reads exceed one partition's read units."""
    today = run(TODAY, Size(400, 10), "steady", cap_leases=1)
    flat = run(FLAT, Size(400, 10), "steady", cap_leases=1)
    assert today.steady_hottest is not None and flat.steady_hottest is not None
    assert today.steady_hottest.fraction > 1 and today.steady_throttled > 0
    assert flat.steady_hottest.fraction < 0.5 and flat.steady_throttled == 0


def test_the_scale_out_study_prints_a_row_for_the_fleet_it_played(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m bench.fleet_model.study`` plays one scale-out with the changes asked for and
    says how long it took, what throttled and how busy each component's partitions were."""
    assert study.main(["--workers", "10", "--per-worker", "100", "--offer-handoffs"]) == 0
    cells = [c.strip() for c in capsys.readouterr().out.strip().strip("|").split("|")]
    fleet, variant, leases, _unowned, throttled, *busiest = cells
    assert (fleet, variant, throttled) == ("10 × 100", "1024 shards, offer handoffs", "0")
    assert float(leases) <= 10
    assert len(busiest) == len(study.COMPONENTS)
    assert busiest[study.COMPONENTS.index("orphans")] in ("0%", "1%"), "no handoff wrote it"


def test_the_study_counts_no_handoff_in_a_balanced_fleet_s_steady_minute(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--steady``: a fleet already balanced hands nothing off, even with givers that keep no
    slack (what the study's churn row checks)."""
    argv = ["--steady", "--workers", "10", "--per-worker", "100", "--slack", "0"]
    assert study.main(argv) == 0
    assert capsys.readouterr().out.strip().endswith("steady minute: 0 rebalance handoffs |")
