"""SessionStore against the serialised moto server: a worker item's life only moves forward
(create → renew … → DRAINING → EXPIRED → gone), each step one conditional write
(architecture §4a)."""

from __future__ import annotations

import pytest

from streamlease import checkpoints
from streamlease.errors import SessionExpired, StoreError
from streamlease.model import WorkerInfo
from streamlease.schema import Liveness, WorkerState
from streamlease.session_store import SessionStore, WorkerLoad

NOW = 1_800_000_000_000
LEASE_MS = 20_000


def info(worker_id: str = "w1", *, started_at_ms: int = NOW, **fields: object) -> WorkerInfo:
    values: dict[str, object] = {
        "worker_id": worker_id,
        "state": WorkerState.RUNNING,
        "heartbeat_at_ms": NOW,
        "expires_at_ms": NOW + LEASE_MS,
        "active_streams": 0,
        "capacity": 100,
        "host": "h",
        "pid": 1,
        "started_at_ms": started_at_ms,
    }
    values.update(fields)
    return WorkerInfo(**values)  # type: ignore[arg-type]


def renew(sessions: SessionStore, expires: int, worker_id: str = "w1", **kw: object) -> None:
    sessions.renew(
        worker_id, expires_at_ms=expires, now_ms=expires - LEASE_MS, active_streams=2, **kw
    )  # type: ignore[arg-type]


def test_a_session_is_created_once_and_a_retried_create_is_fine(sessions: SessionStore) -> None:
    sessions.create(info())
    sessions.create(info())  # the same create again (its first answer was lost)
    with pytest.raises(SessionExpired):
        sessions.create(info(started_at_ms=NOW + 1))  # another incarnation with the same id
    fleet = sessions.list_fleet()
    assert [(w.worker_id, w.hb, w.liveness) for w in fleet] == [("w1", 0, Liveness.SESSION)]


def test_a_renewal_counts_hb_and_carries_the_checkpoint_vector(sessions: SessionStore) -> None:
    sessions.create(info())
    vector = checkpoints.encode(
        [checkpoints.Checkpoint(3, 41, 1), None, checkpoints.Checkpoint(1, 7, 2)]
    )
    renew(sessions, NOW + 25_000, checkpoints=vector)
    renew(sessions, NOW + 30_000, checkpoints=vector)
    read = sessions.read("w1")
    assert read is not None
    assert (read.hb, read.expires_at_ms, read.active_streams) == (2, NOW + 30_000, 2)
    assert read.checkpoints == vector
    assert sessions.list_fleet()[0].checkpoints is None, "the fleet index leaves vectors out"


def test_a_renewal_applied_late_changes_nothing(sessions: SessionStore) -> None:
    """An older renewal DynamoDB applies after a newer one is refused: the expiry never moves
    back and hb counts only renewals that took effect."""
    sessions.create(info())
    renew(sessions, NOW + 30_000)
    with pytest.raises(StoreError):
        renew(sessions, NOW + 25_000)
    read = sessions.read("w1")
    assert read is not None and (read.hb, read.expires_at_ms) == (1, NOW + 30_000)


def test_draining_is_never_undone_by_a_renewal(sessions: SessionStore) -> None:
    """A renewal in flight when the worker marks itself DRAINING lands without touching the
    state (the review's race: the item showed RUNNING again)."""
    sessions.create(info())
    sessions.mark_draining("w1")
    renew(sessions, NOW + 25_000)
    read = sessions.read("w1")
    assert read is not None and read.state is WorkerState.DRAINING
    sessions.mark_draining("w1")  # idempotent


def test_the_tombstone_needs_the_hb_the_observer_saw(sessions: SessionStore) -> None:
    """A session that renewed since it was judged wins over the tombstone."""
    sessions.create(info())
    renew(sessions, NOW + 25_000)
    lost = sessions.expire("w1", by="peer", seen_hb=0, now_ms=NOW)
    assert not lost.won and lost.session is not None and lost.session.is_live
    won = sessions.expire("w1", by="peer", seen_hb=1, now_ms=NOW)
    assert won.won and won.session is not None
    assert won.session.state is WorkerState.EXPIRED
    again = sessions.expire("w1", by="other", seen_hb=1, now_ms=NOW)
    assert not again.won, "one winner"


def test_the_winner_gets_the_checkpoint_vector(sessions: SessionStore) -> None:
    sessions.create(info())
    vector = checkpoints.encode([checkpoints.Checkpoint(5, 99, 1)])
    renew(sessions, NOW + 25_000, checkpoints=vector)
    expiry = sessions.expire("w1", by="peer", seen_hb=1, now_ms=NOW)
    assert expiry.session is not None and expiry.session.checkpoints == vector


def test_an_expired_session_never_renews_or_drains_again(sessions: SessionStore) -> None:
    sessions.create(info())
    sessions.expire("w1", by="reaper", seen_hb=None, now_ms=NOW)
    with pytest.raises(SessionExpired):
        renew(sessions, NOW + 25_000)
    with pytest.raises(SessionExpired):
        sessions.mark_draining("w1")


def test_only_a_tombstone_is_deleted_and_gone_means_gone(sessions: SessionStore) -> None:
    """A live session is never deleted; a deleted one refuses a late renewal instead of
    coming back."""
    sessions.create(info())
    assert not sessions.delete("w1")
    sessions.expire("w1", by="w1", seen_hb=None, now_ms=NOW)
    assert sessions.delete("w1")
    with pytest.raises(SessionExpired):
        renew(sessions, NOW + 25_000)
    assert sessions.read("w1") is None


def test_read_many_returns_whole_items_of_the_sessions_that_exist(sessions: SessionStore) -> None:
    sessions.create(info("a"))
    sessions.create(info("b"))
    vector = checkpoints.encode([checkpoints.Checkpoint(2, 3, 1)])
    renew(sessions, NOW + 25_000, worker_id="a", checkpoints=vector)
    found = sessions.read_many(["a", "b", "missing"])
    assert sorted(found) == ["a", "b"]
    assert found["a"].checkpoints == vector


def test_the_fleet_is_read_in_windows_after_a_session_in_start_order(
    sessions: SessionStore,
) -> None:
    """A window begins after the given session; pages go on from where one stopped; without a
    session, from the oldest (the wrap-around)."""
    for n in range(7):
        sessions.create(info(f"w{n}", started_at_ms=NOW + n))
    me = info("w2", started_at_ms=NOW + 2)
    first = sessions.fleet_after(me, 3)
    assert [w.worker_id for w in first.sessions] == ["w3", "w4", "w5"]
    assert first.more is not None
    rest = sessions.fleet_after(me, 3, cursor=first.more)
    assert [w.worker_id for w in rest.sessions] == ["w6"]
    wrap = sessions.fleet_after(None, 3)
    assert [w.worker_id for w in wrap.sessions] == ["w0", "w1", "w2"]


def test_a_window_after_sessions_started_in_the_same_millisecond_skips_none(
    sessions: SessionStore,
) -> None:
    """Ties in start time are ordered by key: the window after one goes on to the next."""
    for name in ("a", "b", "c"):
        sessions.create(info(name, started_at_ms=NOW))
    after_a = sessions.fleet_after(info("a", started_at_ms=NOW), 5)
    assert [w.worker_id for w in after_a.sessions] == ["b", "c"]


def test_a_renewal_carries_the_workers_load_and_cpu_on_its_item_not_the_fleet_index(
    sessions: SessionStore,
) -> None:
    """The load rides on the renewal (no write of its own); peers read it from the items, as
    the deployed ``fleet`` index does not project it. A renewal that measured nothing leaves
    the last figures as they were; a worker that never published reads None."""
    sessions.create(info())
    sessions.create(info("quiet"))
    renew(sessions, NOW + 25_000, load_milli=12_345, cpu_permille=420)
    renew(sessions, NOW + 30_000)
    loads = sessions.read_loads(["w1", "quiet", "gone"])
    assert loads == {
        "w1": WorkerLoad(load_milli=12_345, cpu_permille=420),
        "quiet": WorkerLoad(load_milli=None, cpu_permille=None),
    }
    assert all(w.load is None for w in sessions.list_fleet()), "not in the fleet index"
