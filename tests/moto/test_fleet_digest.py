"""The fleet digest item: one writer at a time by a lease on the item, taken over once the
writer's claim lapsed, handed over at once by a draining writer."""

from __future__ import annotations

import time
from typing import Any

import pytest

from streamlease.fleet_digest import DigestStore
from streamlease.placement import FleetLoad
from streamlease.schema import FLEET_DIGEST_KEY, PK
from worker.ownership.fleet_view import FleetView, view_from_digest

LEASE_MS = 20_000
SKEW_MS = 1_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def digests(dynamodb: Any, aws_settings: Any, clock: Clock) -> DigestStore:
    return DigestStore(dynamodb, aws_settings.table_name, clock_skew_ms=SKEW_MS, clock_ms=clock)


def test_the_first_claim_wins_and_publishes(digests: DigestStore, clock: Clock) -> None:
    assert digests.read() is None
    assert digests.claim("w1", LEASE_MS)
    assert not digests.claim("w2", LEASE_MS), "a live claim is not taken over"
    assert digests.publish("w1", LEASE_MS, sessions=40, live=38, total=3800, deficit=12)
    digest = digests.read()
    assert digest is not None
    assert (digest.writer, digest.sessions, digest.live_workers) == ("w1", 40, 38)
    assert (digest.total_streams, digest.deficit, digest.fill_to_share) == (3800, 12, False)
    assert digest.fresh(clock.now) and not digest.claimable(clock.now, SKEW_MS)


def test_only_the_writer_publishes(digests: DigestStore) -> None:
    """A worker that lost the digest learns it from its next write, and stops."""
    digests.claim("w1", LEASE_MS)
    assert not digests.publish("w2", LEASE_MS, sessions=1, live=1, total=1, deficit=0)


def test_a_lapsed_claim_is_taken_over_after_the_skew_allowance(
    digests: DigestStore, clock: Clock
) -> None:
    digests.claim("w1", LEASE_MS)
    clock.now += LEASE_MS + SKEW_MS
    assert not digests.claim("w2", LEASE_MS), "within the skew allowance"
    clock.now += 1
    assert digests.claim("w2", LEASE_MS)
    assert not digests.publish("w1", LEASE_MS, sessions=1, live=1, total=1, deficit=0)


def test_a_draining_writer_hands_the_digest_over_at_once(
    digests: DigestStore, clock: Clock
) -> None:
    digests.claim("w1", LEASE_MS)
    digests.resign("w2")  # not the writer: nothing happens
    assert not digests.claim("w3", LEASE_MS)
    digests.resign("w1")
    digest = digests.read()
    assert digest is not None and digest.claimable(clock.now, SKEW_MS)
    assert digests.claim("w3", LEASE_MS)


def test_the_digest_carries_the_fleets_load_and_drops_it_when_counts_decide(
    digests: DigestStore,
) -> None:
    assert digests.claim("w1", LEASE_MS)
    load = FleetLoad(mean=40.5, room=60.0, surplus=59.25)
    assert digests.publish(
        "w1", LEASE_MS, sessions=3, live=3, total=30, deficit=0, surplus=4, load=load
    )
    digest = digests.read()
    assert digest is not None
    assert (digest.surplus, digest.load) == (4, load)
    assert digests.publish("w1", LEASE_MS, sessions=3, live=3, total=30, deficit=0)
    again = digests.read()
    assert again is not None and again.load is None


def test_the_digest_says_whether_takers_fill_to_the_share(digests: DigestStore) -> None:
    """Its deficit is counted to the share then (few streams a worker): readers fill to it,
    and a worker at the share rounded down is one of the takers, not one that stays out of the
    queue while the fleet rebalances."""
    digests.claim("w1", LEASE_MS)
    assert digests.publish(
        "w1", LEASE_MS, sessions=20, live=20, total=30, deficit=10, surplus=3, fill_to_share=True
    )
    digest = digests.read()
    assert digest is not None and digest.fill_to_share
    view = FleetView()
    view_from_digest(view, digest)
    assert (view.share, view.taking_share, view.fill_line) == (2, 1, 2)
    assert view.surplus == 3 and view.holds_off(time.monotonic(), 5.0)
    assert digests.publish("w1", LEASE_MS, sessions=20, live=20, total=30, deficit=0)
    digest = digests.read()
    assert digest is not None and not digest.fill_to_share


def test_an_earlier_writer_s_publish_leaves_no_stale_balance_to_read(
    digests: DigestStore, dynamodb: Any, aws_settings: Any, clock: Clock
) -> None:
    """A writer of an earlier version (a rolling deploy, a rollback) updates the counts without
    ``fill_to_share``: the value a newer writer left is not read with its counts."""
    digests.claim("w1", LEASE_MS)
    digests.publish("w1", LEASE_MS, sessions=20, live=20, total=30, deficit=10, fill_to_share=True)
    clock.now += 1_000
    dynamodb.update_item(  # what an earlier version's publish writes
        TableName=aws_settings.table_name,
        Key={PK: {"S": FLEET_DIGEST_KEY}},
        UpdateExpression="SET written_at_ms = :now, deficit = :d",
        ExpressionAttributeValues={":now": {"N": str(clock.now)}, ":d": {"N": "0"}},
    )
    digest = digests.read()
    assert digest is not None and digest.deficit == 0
    assert not digest.fill_to_share
