"""LeaseStore against the serialised moto server: every rule of architecture §4 as one
conditional write.

Times are explicit wall milliseconds (``NOW``) so expiry edges are exact, not raced.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ReadTimeoutError
from stream_items import put_stream

from streamlease import rules
from streamlease.errors import LeaseConflict, LeaseLost, StoreError, StreamStopped
from streamlease.lease_store import LeaseStore
from streamlease.model import StreamProgress
from streamlease.schema import (
    PK,
    SESSION_HELD_MS,
    ConnectionState,
    DesiredState,
    Liveness,
    StreamAttr,
    stream_key,
)
from streamlease.seqs import NOTHING_DELIVERED

NOW = 1_800_000_000_000
LEASE_MS = 20_000
HEARTBEAT_MS = 5_000
SKEW_MS = 1_000
A = StreamAttr


@pytest.fixture
def table(aws_settings: Any) -> str:
    return str(aws_settings.table_name)


@pytest.fixture
def seed(dynamodb: Any, table: str) -> Any:
    """``seed(stream_id, **fields)`` writes a stream item (see :func:`put_stream`)."""

    def write(stream_id: str, **fields: Any) -> None:
        put_stream(dynamodb, table, stream_id, **fields)

    return write


class ResponseLosingClient:
    """A DynamoDB client whose next successful ``update_item`` lands but whose answer is lost.

    ``retry=False``: the caller sees a read timeout. ``retry=True``: the caller sees what
    botocore's automatic retry of the same request gets back (a failed condition).
    """

    def __init__(self, client: Any, *, retry: bool) -> None:
        self._client = client
        self._retry = retry
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_item(self, **request: Any) -> Any:
        response = self._client.update_item(**request)
        if not self.armed:
            return response
        self.armed = False
        if self._retry:
            return self._client.update_item(**request)
        raise ReadTimeoutError(endpoint_url="http://dynamodb.test")


# --- acquire ---------------------------------------------------------------------------------


def test_acquire_free_stream_sets_owner_expiry_and_first_epoch(store, seed):
    """A never-owned STARTED stream is acquired with epoch 1 and a full lease."""
    seed("s1")

    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    assert (lease.owner, lease.epoch, lease.expires_at_ms) == ("w1", 1, NOW + LEASE_MS)
    assert lease.last_seq == NOTHING_DELIVERED
    assert not lease.is_takeover
    stored = store.read("s1")
    assert (stored.owner, stored.epoch, stored.expires_at_ms) == ("w1", 1, NOW + LEASE_MS)
    assert stored.acquired_at_ms == NOW


def test_acquire_released_stream_resumes_from_last_seq_without_takeover(store, seed):
    """A released lease is taken with epoch + 1, resuming at its checkpoint; no takeover counted."""
    seed("s1", epoch=3, last_seq=42, takeovers=2)

    lease = store.acquire("s1", "w2", LEASE_MS, now_ms=NOW)

    assert (lease.epoch, lease.last_seq, lease.previous_owner) == (4, 42, None)
    assert store.read("s1").takeovers == 2


def test_acquire_expired_lease_is_a_takeover(store, seed):
    """An expired holder is replaced: epoch + 1, takeovers + 1, previous owner reported."""
    seed("s1", owner="w-old", expires_ms=NOW - SKEW_MS - 1, epoch=5, last_seq=7, takeovers=1)

    lease = store.acquire("s1", "w-new", LEASE_MS, now_ms=NOW)

    assert lease.is_takeover and lease.previous_owner == "w-old"
    assert (lease.epoch, lease.last_seq) == (6, 7)
    stored = store.read("s1")
    assert (stored.owner, stored.epoch, stored.takeovers) == ("w-new", 6, 2)


def test_acquire_live_lease_conflicts_and_changes_nothing(store, seed):
    """A lease that has not expired stays with its holder."""
    seed("s1", owner="w1", expires_ms=NOW + 1, epoch=2)

    with pytest.raises(LeaseConflict) as conflict:
        store.acquire("s1", "w2", LEASE_MS, now_ms=NOW)

    assert conflict.value.reason == "owned"
    stored = store.read("s1")
    assert (stored.owner, stored.epoch, stored.expires_at_ms) == ("w1", 2, NOW + 1)


def test_acquire_stopped_stream_conflicts(store, seed):
    """A STOPPED stream is never acquired, even when free."""
    seed("s1", state=DesiredState.STOPPED)

    with pytest.raises(LeaseConflict) as conflict:
        store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    assert conflict.value.reason == "stopped"
    assert store.read("s1").owner is None


def test_acquire_missing_stream_conflicts_and_creates_nothing(store):
    """Acquiring an id with no item fails and does not create a stub item."""
    with pytest.raises(LeaseConflict) as conflict:
        store.acquire("ghost", "w1", LEASE_MS, now_ms=NOW)

    assert conflict.value.reason == "missing"
    assert store.read("ghost") is None


@pytest.mark.parametrize(
    ("expired_for_ms", "takeable"),
    [
        (0, False),  # expires exactly now
        (SKEW_MS // 2, False),  # expired, but by less than the skew allowance
        (SKEW_MS, False),  # exactly at the cutoff: the condition is strict
        (SKEW_MS + 1, True),
    ],
)
def test_acquire_waits_out_the_clock_skew_allowance(store, seed, expired_for_ms, takeable):
    """A lease is takeable only once it expired more than the skew allowance ago."""
    seed("s1", owner="w-old", expires_ms=NOW - expired_for_ms, epoch=1)

    if takeable:
        assert store.acquire("s1", "w-new", LEASE_MS, now_ms=NOW).epoch == 2
    else:
        with pytest.raises(LeaseConflict):
            store.acquire("s1", "w-new", LEASE_MS, now_ms=NOW)
        assert store.read("s1").owner == "w-old"


def test_acquire_after_own_lease_expired_takes_a_new_epoch(store, seed):
    """A worker re-acquiring a lease it let lapse gets a fresh expiry and epoch + 1.

    Handing back the stale item would let it deliver under an expiry already in the past,
    while anyone else may take the stream over.
    """
    seed("s1", owner="w1", expires_ms=NOW - SKEW_MS - 1, epoch=4)

    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    assert (lease.epoch, lease.expires_at_ms) == (5, NOW + LEASE_MS)
    assert store.read("s1").epoch == 5


def test_acquire_of_own_live_lease_from_an_earlier_acquire_conflicts(store, seed):
    """Only the retry of this very request counts as "ours": an older holding is not renewed."""
    seed("s1", owner="w1", expires_ms=NOW + 3_000, epoch=4)

    with pytest.raises(LeaseConflict):
        store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    assert store.read("s1").expires_at_ms == NOW + 3_000


@pytest.mark.parametrize("expired_owner", [None, "w-old"], ids=["free", "takeover"])
def test_acquire_whose_answer_was_lost_is_resolved_by_reading(dynamodb, table, seed, expired_owner):
    """A timed-out acquire that landed is recognised by a consistent re-read."""
    seed("s1", owner=expired_owner, expires_ms=NOW - SKEW_MS - 1 if expired_owner else 0, epoch=1)
    store = LeaseStore(ResponseLosingClient(dynamodb, retry=False), table, clock_skew_ms=SKEW_MS)

    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    assert (lease.owner, lease.epoch, lease.expires_at_ms) == ("w1", 2, NOW + LEASE_MS)
    assert lease.previous_owner == expired_owner


@pytest.mark.parametrize("expired_owner", [None, "w-old"], ids=["free", "takeover"])
def test_retried_acquire_that_already_landed_is_ours(dynamodb, table, seed, expired_owner):
    """The retry of a landed acquire fails its condition on our own write; it is ours."""
    seed("s1", owner=expired_owner, expires_ms=NOW - SKEW_MS - 1 if expired_owner else 0, epoch=1)
    store = LeaseStore(ResponseLosingClient(dynamodb, retry=True), table, clock_skew_ms=SKEW_MS)

    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    assert (lease.owner, lease.epoch, lease.previous_owner) == ("w1", 2, expired_owner)
    assert store.read("s1").epoch == 2


def test_acquire_with_no_answer_at_all_raises_store_error(store, seed, moto_server):
    """When neither the write nor the re-read is answered, the outcome is unknown."""
    seed("s1")
    moto_server.set_dynamodb_down(True)
    try:
        with pytest.raises(StoreError):
            store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    finally:
        moto_server.set_dynamodb_down(False)
    assert store.read("s1").owner is None


# --- renew -----------------------------------------------------------------------------------


def test_renew_extends_the_lease_and_checkpoints(store, seed):
    """One write moves the expiry and stores last_seq."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    expires = store.renew("s1", "w1", lease.epoch, 99, LEASE_MS, now_ms=NOW + HEARTBEAT_MS)

    assert expires == NOW + HEARTBEAT_MS + LEASE_MS
    stored = store.read("s1")
    assert (stored.expires_at_ms, stored.last_seq, stored.epoch) == (expires, 99, lease.epoch)


def test_renew_of_a_stopped_stream_raises_stream_stopped_and_keeps_the_lease(
    store, seed, dynamodb, table
):
    """Stop reaches the holder through its renewal; the lease stays its own to release."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    set_state(dynamodb, table, "s1", DesiredState.STOPPED)

    with pytest.raises(StreamStopped):
        store.renew("s1", "w1", lease.epoch, 5, LEASE_MS, now_ms=NOW + 1)

    assert store.read("s1").owner == "w1"
    released = store.release("s1", "w1", lease.epoch, last_seq=5, now_ms=NOW + 2)
    assert released is not None and released.desired_state is DesiredState.STOPPED
    assert store.read("s1").last_seq == 5


def test_renew_with_a_stale_epoch_is_lost(store, seed):
    """A renewal naming an older epoch than the stored one fails."""
    seed("s1", owner="w1", expires_ms=NOW + LEASE_MS, epoch=3)

    with pytest.raises(LeaseLost) as lost:
        store.renew("s1", "w1", 2, 10, LEASE_MS, now_ms=NOW)

    assert lost.value.reason == "epoch moved on"
    assert store.read("s1").last_seq == NOTHING_DELIVERED


def test_renew_after_a_takeover_is_lost(store, seed):
    """The old holder's renewal after someone took over writes nothing."""
    seed("s1")
    old = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    later = NOW + LEASE_MS + SKEW_MS + 1
    new = store.acquire("s1", "w2", LEASE_MS, now_ms=later)

    with pytest.raises(LeaseLost):
        store.renew("s1", "w1", old.epoch, 500, LEASE_MS, now_ms=later + 1)

    stored = store.read("s1")
    assert (stored.owner, stored.epoch, stored.last_seq) == ("w2", new.epoch, NOTHING_DELIVERED)


def test_renew_after_deletion_is_lost_and_recreates_nothing(store, seed, dynamodb, table):
    """A renewal of a deleted stream fails instead of writing a stub item."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    dynamodb.delete_item(TableName=table, Key={PK: {"S": stream_key("s1")}})

    with pytest.raises(LeaseLost) as lost:
        store.renew("s1", "w1", lease.epoch, 1, LEASE_MS, now_ms=NOW + 1)

    assert lost.value.reason == "stream deleted"
    assert store.read("s1") is None


# --- release and record_connection -----------------------------------------------------------


def test_release_frees_the_lease_with_a_final_checkpoint_and_is_idempotent(store, seed):
    """Release clears owner and expiry and writes last_seq; a retried release finds it free at
    its epoch and answers the same (the caller's handoff is not lost with the first answer)."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)

    first = store.release("s1", "w1", lease.epoch, last_seq=12, now_ms=NOW + 1)
    again = store.release("s1", "w1", lease.epoch, last_seq=12, now_ms=NOW + 2)
    assert first is not None and again is not None
    assert first.desired_state is again.desired_state is DesiredState.STARTED

    stored = store.read("s1")
    assert (stored.owner, stored.expires_at_ms, stored.last_seq) == (None, 0, 12)
    assert stored.epoch == lease.epoch


def test_release_after_a_takeover_is_lost_and_writes_no_checkpoint(store, seed):
    """A late release of a lease taken over since must not overwrite the new owner's state."""
    seed("s1")
    old = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    later = NOW + LEASE_MS + SKEW_MS + 1
    store.acquire("s1", "w2", LEASE_MS, now_ms=later)
    store.renew("s1", "w2", old.epoch + 1, 30, LEASE_MS, now_ms=later + 1)

    with pytest.raises(LeaseLost):
        store.release("s1", "w1", old.epoch, last_seq=999, now_ms=later + 2)

    stored = store.read("s1")
    assert (stored.owner, stored.last_seq) == ("w2", 30)


def test_a_retried_release_that_landed_before_another_worker_acquired_is_released(store, seed):
    """The first release landed but its answer was lost; another worker acquired the free
    stream before the retry. The retry is not a loss: the stream was handed over, and the
    caller learns it (owned by the new holder, so no handoff is needed)."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    store.release("s1", "w1", lease.epoch, last_seq=12, now_ms=NOW + 1)  # the answer is lost
    store.acquire("s1", "w2", LEASE_MS, now_ms=NOW + 2)

    again = store.release("s1", "w1", lease.epoch, last_seq=12, now_ms=NOW + 3)
    assert again is not None
    assert (again.owner, again.epoch, again.last_seq) == ("w2", lease.epoch + 1, 12)
    assert store.read("s1").owner == "w2"


def test_a_release_after_the_holder_was_freed_by_a_peer_is_lost(store, seed):
    """A peer freed the holding as dead (``release_for``): the stream is free at the holder's
    epoch, but the holder did not hand it over; its release is a loss, not a handoff."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    assert store.release_for("s1", "w1", lease.epoch, None, now_ms=NOW + 1) is not None

    with pytest.raises(LeaseLost):
        store.release("s1", "w1", lease.epoch, last_seq=12, now_ms=NOW + 2)


def test_release_of_a_deleted_stream_reports_nothing_released(store, seed, dynamodb, table):
    """Releasing a stream that was deleted meanwhile is not an error."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    dynamodb.delete_item(TableName=table, Key={PK: {"S": stream_key("s1")}})

    assert store.release("s1", "w1", lease.epoch, now_ms=NOW + 1) is None
    assert store.read("s1") is None


def test_a_connection_state_change_is_recorded_with_its_error_while_holding(store, seed):
    """The holder records how the upstream is doing and why; long messages are truncated."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    assert store.read("s1").connection_state is ConnectionState.CONNECTING

    store.record_connection(
        "s1", "w1", lease.epoch, ConnectionState.REJECTED, "handshake 403 " + "x" * 1000, now_ms=NOW
    )

    stored = store.read("s1")
    assert stored.connection_state is ConnectionState.REJECTED
    assert stored.last_error.startswith("handshake 403")
    assert len(stored.last_error) == 500
    assert stored.last_error_at == stored.connection_since == "2027-01-15T08:00:00.000Z"
    assert stored.last_error_active


def test_an_error_is_past_once_the_stream_is_connected_again(store, seed):
    """last_error stays, with its time; once connected since, it reads as past."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    store.record_connection("s1", "w1", lease.epoch, ConnectionState.RETRYING, "1006", now_ms=NOW)
    store.record_connection("s1", "w1", lease.epoch, ConnectionState.CONNECTED, now_ms=NOW + 5)
    stored = store.read("s1")
    assert (stored.last_error, stored.connection_state) == ("1006", ConnectionState.CONNECTED)
    assert not stored.last_error_active


def test_a_release_clears_the_connection_state_and_an_ended_stream_keeps_it(store, seed):
    seed("a")
    seed("b")
    a = store.acquire("a", "w1", LEASE_MS, now_ms=NOW)
    b = store.acquire("b", "w1", LEASE_MS, now_ms=NOW)
    store.release("a", "w1", a.epoch, now_ms=NOW + 1)
    ended = store.release("b", "w1", b.epoch, stop=True, last_error="closed 1000", now_ms=NOW + 1)
    assert store.read("a").connection_state is None
    assert ended is not None and ended.connection_state is ConnectionState.ENDED
    assert (ended.desired_state, ended.generation) == (DesiredState.STOPPED, 2)


def test_a_connection_state_after_losing_the_lease_is_lost(store, seed):
    """An old holder cannot write over the new holder's item."""
    seed("s1", owner="w2", expires_ms=NOW + LEASE_MS, epoch=2)

    with pytest.raises(LeaseLost):
        store.record_connection("s1", "w1", 1, ConnectionState.RETRYING, "boom", now_ms=NOW)

    assert store.read("s1").last_error is None


def raw_item(dynamodb: Any, table: str, stream_id: str) -> dict[str, Any]:
    response = dynamodb.get_item(
        TableName=table, Key={PK: {"S": stream_key(stream_id)}}, ConsistentRead=True
    )
    return {k: TypeDeserializer().deserialize(v) for k, v in response["Item"].items()}


PROGRESS = StreamProgress(
    received=125,
    delivered=100,
    malformed=20,
    gaps=1,
    last_message_at_ms=NOW - 5,
    at_ms=NOW,
    control=5,
)


def test_progress_rides_on_a_state_change_or_goes_alone_while_holding(store, seed, dynamodb, table):
    """Counters with a connection-state write, or by themselves (touching no index key), with
    when they were written; an old holder cannot write over the new holder's."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    store.record_connection(
        "s1",
        "w1",
        lease.epoch,
        ConnectionState.MALFORMED,
        "no `seq`",
        progress=PROGRESS,
        now_ms=NOW,
    )
    item = raw_item(dynamodb, table, "s1")
    assert StreamProgress.from_item(item) == PROGRESS
    later = dataclasses.replace(
        PROGRESS, delivered=150, last_message_at_ms=NOW + 9, at_ms=NOW + 10, seq=4321
    )
    store.record_progress("s1", "w1", lease.epoch, later)
    item = raw_item(dynamodb, table, "s1")
    assert StreamProgress.from_item(item) == later
    assert (item[A.PROGRESS_AT_MS], item[A.CONNECTION_STATE]) == (NOW + 10, "malformed")
    assert item[A.PROGRESS_SEQ] == 4321  # the seq acknowledged when counted: a rate's baseline
    with pytest.raises(LeaseLost):
        store.record_progress("s1", "w2", lease.epoch, PROGRESS)


def test_the_release_keeps_the_final_progress_and_the_next_acquire_clears_it(
    store, seed, dynamodb, table
):
    """A stopped stream shows how far its last holding got; a new holding starts from none."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    final = dataclasses.replace(PROGRESS, seq=100)
    store.release("s1", "w1", lease.epoch, last_seq=100, progress=final, now_ms=NOW + 1)
    assert StreamProgress.from_item(raw_item(dynamodb, table, "s1")) == final
    store.acquire("s1", "w2", LEASE_MS, now_ms=NOW + 2)
    item = raw_item(dynamodb, table, "s1")
    assert StreamProgress.from_item(item) is None
    assert A.LAST_MESSAGE_AT_MS not in item and A.PROGRESS_AT_MS not in item
    assert A.PROGRESS_SEQ not in item


# --- queries ---------------------------------------------------------------------------------


@pytest.fixture
def per_stream_store(dynamodb: Any, aws_settings: Any) -> LeaseStore:
    """The lease store of a per-stream fleet."""
    return LeaseStore(
        dynamodb, aws_settings.table_name, clock_skew_ms=SKEW_MS, liveness=Liveness.STREAM
    )


@pytest.fixture
def expiry_landscape(seed):
    """Five streams of a per-stream fleet: released, expired, suspect, healthy, stopped."""
    per_stream = {"liveness": Liveness.STREAM}
    seed("released", epoch=1, **per_stream)
    seed("expired", owner="w1", expires_ms=NOW - SKEW_MS - 10, epoch=1, **per_stream)
    seed(
        "suspect",
        owner="w2",
        expires_ms=NOW + LEASE_MS - 2 * HEARTBEAT_MS - 10,
        epoch=1,
        **per_stream,
    )
    seed("healthy", owner="w3", expires_ms=NOW + LEASE_MS - 10, epoch=1, **per_stream)
    seed("stopped", state=DesiredState.STOPPED)


def test_expiring_before_the_cutoff_lists_orphans_soonest_first(per_stream_store, expiry_landscape):
    """Below the acquire cutoff: released and expired STARTED streams, in expiry order."""
    views = per_stream_store.expiring_before(rules.acquire_cutoff_ms(NOW, SKEW_MS), limit=10)

    assert [v.stream_id for v in views] == ["released", "expired"]
    assert (views[1].owner, views[1].epoch) == ("w1", 1)


def test_expiring_before_the_suspect_bound_adds_missed_heartbeats(
    per_stream_store, expiry_landscape
):
    """Below the suspect bound: also the live lease that missed two heartbeats."""
    bound = rules.suspect_bound_ms(NOW, LEASE_MS, HEARTBEAT_MS)

    views = per_stream_store.expiring_before(bound, limit=10)

    assert [v.stream_id for v in views] == ["released", "expired", "suspect"]


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_expiring_before_respects_the_limit(per_stream_store, expiry_landscape, limit):
    """At most ``limit`` leases are returned (none for 0)."""
    views = per_stream_store.expiring_before(
        rules.suspect_bound_ms(NOW, LEASE_MS, HEARTBEAT_MS), limit=limit
    )

    assert [v.stream_id for v in views] == ["released", "expired", "suspect"][:limit]


def test_owned_by_lists_what_a_worker_holds(store, seed):
    """The owner index lists a worker's current leases only."""
    for stream_id in ("a", "b", "c", "d"):
        seed(stream_id)
    store.acquire("a", "w1", LEASE_MS, now_ms=NOW)
    store.acquire("b", "w1", LEASE_MS, now_ms=NOW)
    store.acquire("c", "w2", LEASE_MS, now_ms=NOW)
    released = store.acquire("d", "w1", LEASE_MS, now_ms=NOW)
    store.release("d", "w1", released.epoch, now_ms=NOW)

    assert sorted(v.stream_id for v in store.owned_by("w1")) == ["a", "b"]
    assert [v.stream_id for v in store.owned_by("w2")] == ["c"]
    assert store.owned_by("w9") == []


def test_held_through_sessions_walks_every_session_held_stream_page_by_page(store, seed):
    """Only STARTED streams attached to a session, each once, in pages of the limit; the last
    page says there is no next one."""
    for n in range(5):
        seed(f"held{n}", owner=f"w{n % 2}", expires_ms=SESSION_HELD_MS, epoch=n + 1)
    seed("per-stream", owner="w0", expires_ms=NOW + LEASE_MS)
    seed("free")
    seed("stopped", owner="w0", expires_ms=SESSION_HELD_MS, state=DesiredState.STOPPED)
    seen: dict[str, tuple[str | None, int]] = {}
    cursor = None
    for _ in range(5):
        page, cursor = store.held_through_sessions(limit=2, start=cursor)
        assert len(page) <= 2
        seen.update((v.stream_id, (v.owner, v.epoch)) for v in page)
        if cursor is None:
            break
    assert cursor is None
    assert seen == {f"held{n}": (f"w{n % 2}", n + 1) for n in range(5)}


def set_state(dynamodb: Any, table: str, stream_id: str, state: DesiredState) -> None:
    """Change desired_state behind the store's back, as the control plane does."""
    dynamodb.update_item(
        TableName=table,
        Key={PK: {"S": stream_key(stream_id)}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": A.DESIRED_STATE},
        ExpressionAttributeValues={":s": {"S": state.value}},
    )


# --- late answers and late writes (safety review) ----------------------------------------------


def test_a_renewal_applied_late_never_shortens_the_lease_or_moves_the_checkpoint_back(store, seed):
    """The review's case: a renewal sent at T+1000 that DynamoDB applies after the one sent at
    T+5000 changes nothing — the expiry stays T+25000 and last_seq stays 10."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    newer = store.renew("s1", "w1", lease.epoch, 10, LEASE_MS, now_ms=NOW + 5_000)
    with pytest.raises(StoreError):
        store.renew("s1", "w1", lease.epoch, 5, LEASE_MS, now_ms=NOW + 1_000)
    stored = store.read("s1")
    assert (stored.expires_at_ms, stored.last_seq) == (newer, 10)
    with pytest.raises(LeaseConflict):
        store.acquire("s1", "w2", LEASE_MS, now_ms=NOW + 22_001)


def test_a_renewal_with_a_stepped_back_clock_still_extends(store, seed):
    """The holder passes the highest expiry it asked for; the next one is above it."""
    seed("s1")
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    first = store.renew("s1", "w1", lease.epoch, 1, LEASE_MS, now_ms=NOW + 5_000)
    second = store.renew(
        "s1", "w1", lease.epoch, 2, LEASE_MS, now_ms=NOW + 4_000, previous_expires_ms=first
    )
    assert second == first + 1


def test_a_release_whose_answer_was_lost_still_reports_the_stream(dynamodb, table, seed):
    """The retry of a landed release finds it free at its epoch: the caller still learns the
    stream is STARTED and sends its handoff."""
    seed("s1")
    store = LeaseStore(ResponseLosingClient(dynamodb, retry=True), table, clock_skew_ms=SKEW_MS)
    lease = LeaseStore(dynamodb, table).acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    released = store.release("s1", "w1", lease.epoch, last_seq=7, now_ms=NOW + 1)
    assert released is not None and released.desired_state is DesiredState.STARTED
    assert (released.owner, released.last_seq) == (None, 7)


class LandingNothingClient:
    """A DynamoDB client whose next ``update_item`` times out *without* landing."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_item(self, **request: Any) -> Any:
        if self.armed:
            self.armed = False
            raise ReadTimeoutError(endpoint_url="http://dynamodb.test")
        return self._client.update_item(**request)


def test_an_acquire_that_did_not_land_is_tried_again_not_reported_owned(dynamodb, table, seed):
    """The re-read finds the stream free: the acquire is attempted once more and wins, so the
    start command that asked for it is not dropped as "owned by someone"."""
    seed("s1")
    store = LeaseStore(LandingNothingClient(dynamodb), table, clock_skew_ms=SKEW_MS)
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW)
    assert (lease.owner, lease.epoch) == ("w1", 1)


# --- leases attached to a session ---------------------------------------------------------------


def test_a_session_acquire_stores_the_slot_and_a_fixed_expiry(store, seed):
    """Attached to a session: no expiry of its own to renew, out of the orphan index until its
    release, and the slot of its checkpoint in the session's vector."""
    seed("s1", epoch=4, last_seq=9)
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW, slot=3)
    assert (lease.epoch, lease.slot, lease.last_seq) == (5, 3, 9)
    stored = store.read("s1")
    assert (stored.expires_at_ms, stored.slot) == (SESSION_HELD_MS, 3)
    assert stored.held_by_session
    later = NOW + 10 * LEASE_MS
    with pytest.raises(LeaseConflict):
        store.acquire("s1", "w2", LEASE_MS, now_ms=later, slot=0)
    assert store.expiring_before(rules.acquire_cutoff_ms(later, SKEW_MS), limit=10) == []


def test_a_session_acquire_whose_answer_was_lost_is_recognised_by_its_slot(dynamodb, table, seed):
    seed("s1")
    store = LeaseStore(ResponseLosingClient(dynamodb, retry=False), table, clock_skew_ms=SKEW_MS)
    lease = store.acquire("s1", "w1", LEASE_MS, now_ms=NOW, slot=2)
    assert (lease.owner, lease.slot, lease.epoch) == ("w1", 2, 1)


def test_take_from_a_dead_session_resumes_at_the_larger_checkpoint(store, seed):
    """Epoch + 1, takeovers + 1, the new session's slot; last_seq moves up to the vector's, never
    down (the item's own is kept when it is further)."""
    seed("a", owner="dead", expires_ms=SESSION_HELD_MS, epoch=3, last_seq=10)
    seed("b", owner="dead", expires_ms=SESSION_HELD_MS, epoch=3, last_seq=50)
    a = store.take_from("a", "dead", 3, 42, "w2", 0, now_ms=NOW)
    b = store.take_from("b", "dead", 3, 42, "w2", 1, now_ms=NOW)
    assert (a.epoch, a.last_seq, a.slot, a.previous_owner) == (4, 42, 0, "dead")
    assert (b.epoch, b.last_seq) == (4, 50)
    assert store.read("a").takeovers == 1


def test_nothing_delivered_and_delivered_up_to_0_stay_apart_through_every_write(store, seed):
    """Acquire, a per-stream renewal, release, takeover and the sweep's release each keep
    "nothing delivered" when the holder delivered nothing (an empty vector slot: no merged
    checkpoint), and move it to 0 once seq 0 was delivered; a later write never moves it
    back to nothing."""
    seed("fresh")
    lease = store.acquire("fresh", "w1", LEASE_MS, now_ms=NOW)
    assert lease.last_seq == NOTHING_DELIVERED
    store.renew("fresh", "w1", lease.epoch, NOTHING_DELIVERED, LEASE_MS, now_ms=NOW + 1)
    store.release("fresh", "w1", lease.epoch, last_seq=NOTHING_DELIVERED, now_ms=NOW + 2)
    again = store.acquire("fresh", "w2", LEASE_MS, now_ms=NOW + 3)
    assert (again.epoch, again.last_seq) == (lease.epoch + 1, NOTHING_DELIVERED)
    store.renew("fresh", "w2", again.epoch, 0, LEASE_MS, now_ms=NOW + 4)
    with pytest.raises(StoreError):  # a late write of "nothing" is a renewal overtaken
        store.renew("fresh", "w2", again.epoch, NOTHING_DELIVERED, LEASE_MS, now_ms=NOW + 5)
    assert store.read("fresh").last_seq == 0

    for stream_id in ("taken", "freed", "taken0", "freed0"):
        seed(stream_id, owner="dead", expires_ms=SESSION_HELD_MS, epoch=3)
    vector_slot = rules.checkpoint_for(None, "taken", 3)  # the dead session delivered nothing
    assert store.take_from("taken", "dead", 3, vector_slot, "w2", 0, now_ms=NOW).last_seq == (
        NOTHING_DELIVERED
    )
    freed = store.release_for("freed", "dead", 3, vector_slot, now_ms=NOW)
    assert freed is not None and freed.last_seq == NOTHING_DELIVERED
    assert store.take_from("taken0", "dead", 3, 0, "w2", 1, now_ms=NOW).last_seq == 0
    freed0 = store.release_for("freed0", "dead", 3, 0, now_ms=NOW)
    assert freed0 is not None and freed0.last_seq == 0


def test_take_from_at_a_stale_epoch_or_of_a_stopped_stream_conflicts(store, seed):
    seed("a", owner="dead", expires_ms=SESSION_HELD_MS, epoch=3)
    seed("s", owner="dead", expires_ms=SESSION_HELD_MS, epoch=3, state=DesiredState.STOPPED)
    with pytest.raises(LeaseConflict) as owned:
        store.take_from("a", "dead", 2, None, "w2", 0, now_ms=NOW)
    assert owned.value.reason == "owned"
    with pytest.raises(LeaseConflict) as stopped:
        store.take_from("s", "dead", 3, None, "w2", 0, now_ms=NOW)
    assert stopped.value.reason == "stopped"


def test_release_for_a_dead_holder_frees_it_once(store, seed):
    """The sweep (or the reaper) frees a dead session's stream at its exact owner and epoch,
    with the merged checkpoint; a second sweep finds nothing to do."""
    seed("a", owner="dead", expires_ms=SESSION_HELD_MS, epoch=3, last_seq=10)
    freed = store.release_for("a", "dead", 3, 33, last_error="gone", now_ms=NOW)
    assert freed is not None
    assert (freed.owner, freed.last_seq, freed.expires_at_ms, freed.takeovers) == (None, 33, 0, 1)
    assert store.release_for("a", "dead", 3, 33, now_ms=NOW) is None
