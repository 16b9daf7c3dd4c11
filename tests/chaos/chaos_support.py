"""What every chaos scenario shares: scale, fleet start-up, the finish and the verdict."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Final

import pytest

from local.invariants import EXITED, EXPIRED, Report, format_report, summary_line
from local.testbed import Testbed
from streamlease.settings import Settings

LEASE_SECONDS: Final = 2.0
RATE: Final = 5.0
"""Messages per second per stream."""
WORKERS: Final = 3
STREAMS: Final = 15
MAX_REPEATS_PER_TAKEOVER: Final = RATE * (LEASE_SECONDS + LEASE_SECONDS / 4)
"""A holder that could not hand over delivered at most until its deadline (its last good
renewal + lease − margin) past the checkpoint that renewal wrote; a heartbeat of slack covers
the checkpoint being taken as the renewal was sent."""
CRASH_ENDINGS: Final = frozenset({EXPIRED, EXITED, "fenced", "lost"})
"""How a holder ends when it could not hand over cleanly: only then may a takeover repeat."""


def start_fleet(bed: Testbed, workers: int = WORKERS, streams: int = STREAMS) -> list[str]:
    """Start ``workers`` workers, wait until they are all live (so the streams spread over all of
    them), start ``streams`` streams and wait until every stream is owned."""
    for _ in range(workers):
        bed.add_worker()
    bed.wait_workers_live(workers, timeout_seconds=60)
    ids = bed.create_streams(streams)
    bed.wait_all_owned(ids, timeout_seconds=60)
    return ids


def recovery_timeout(settings: Settings) -> float:
    """A generous bound on failover: a few leases plus room for a loaded machine."""
    return 6 * settings.lease_seconds + 20


def finish(bed: Testbed) -> Report:
    """Stop every worker gracefully and check the invariants up to the moment before."""
    observation_end = time.monotonic()
    bed.stop_all_workers()
    report = bed.report(observation_end=observation_end)
    print(summary_line(report))  # shown with -s, or with the failure
    return report


def assert_invariants(
    bed: Testbed,
    report: Report,
    *,
    duplicates_allowed_after: Iterable[str] = CRASH_ENDINGS,
    max_duplicates_per_takeover: float = MAX_REPEATS_PER_TAKEOVER,
) -> None:
    """No overlap, no gap, no record outside its lease; repeats only after the given endings,
    and bounded per takeover."""
    allowed = set(duplicates_allowed_after)
    problems = report.violations()
    for t in report.takeovers:
        if t.duplicates and t.from_end_reason not in allowed:
            problems.append(
                f"{t.duplicates} duplicate(s) after a takeover from a holder that ended "
                f"{t.from_end_reason} (epoch {t.from_epoch} -> {t.to_epoch})"
            )
        elif t.duplicates > max_duplicates_per_takeover:
            problems.append(
                f"{t.duplicates} duplicates after one takeover (epoch {t.from_epoch} -> "
                f"{t.to_epoch}), more than {max_duplicates_per_takeover:.0f}"
            )
    if problems:
        pytest.fail(
            "invariants broken:\n  "
            + "\n  ".join(problems)
            + "\n\n"
            + format_report(report)
            + "\n\n"
            + bed.diagnosis(),
            pytrace=False,
        )
