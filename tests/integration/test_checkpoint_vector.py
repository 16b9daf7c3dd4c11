"""The checkpoint vector under hostile input and stale state, with real worker processes:
seqs beyond the bound never reach it, and a takeover applies an entry only to the stream it
belongs to (architecture §4a, "Bounded inputs")."""

from __future__ import annotations

import pytest
from worker_helpers import LEASE_SECONDS, Fleet, Streams, new_ids

from local.upstream_sim import UpstreamSimulator
from streamlease import checkpoints
from streamlease.lease_store import wall_ms
from streamlease.model import WorkerInfo
from streamlease.schema import WorkerState
from streamlease.seqs import MAX_SEQ, NOTHING_DELIVERED
from streamlease.session_store import SessionStore
from streamlease.telemetry import WorkerMetric

# Serial: its workers run on a 1 s lease and the scenario needs the first one's session to stay
# live until the kill; beside the parallel phase on a busy machine its renewals went unanswered
# for a lease and it rightly revoked itself (seen once, under a busy loop), which is a bench
# question, not this test's.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


def test_huge_seqs_are_malformed_and_a_takeover_resumes_every_stream_from_the_vector(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """One feed sends, among other garbage, seqs of 2^63, 2^70 and 40 digits: they are counted
    as malformed and the stream delivers on, gapless. After ``kill -9`` of its worker the
    session's vector decodes, and the survivor resumes every stream at its vector entry + 1
    (the stream items still say 0: resuming from them would repeat everything)."""
    victim = fleet.start()
    garbage, *plain = new_ids(3)
    streams.put(garbage, upstream.url_for(garbage, garbage_every=2))
    for stream_id in plain:
        streams.put(stream_id, upstream.url_for(stream_id))
    for stream_id in (garbage, *plain):
        fleet.wait_seq(stream_id, 40)  # the garbage feed has sent its huge seqs by seq 14
    seqs = fleet.seqs(garbage)
    assert seqs == list(range(1, len(seqs) + 1))
    survivor = fleet.start()
    sessions = SessionStore(streams.dynamodb, streams.settings.table_name)
    fleet.wait(
        lambda: survivor.worker_id in {w.worker_id for w in sessions.list_fleet() if w.is_live},
        20,
        "the survivor registered",
    )

    victim.kill()
    session = sessions.read(victim.worker_id)
    assert session is not None and session.checkpoints is not None
    entries = checkpoints.decode(session.checkpoints)  # raises if unreadable
    acked = {}
    for stream_id in (garbage, *plain):
        item = streams.read(stream_id)
        assert (
            item.owner == victim.worker_id
            and item.last_seq == NOTHING_DELIVERED
            and item.slot is not None
        )
        entry = entries[item.slot]
        assert entry is not None and entry.tag == checkpoints.stream_tag(stream_id)
        assert 0 < entry.last_seq <= MAX_SEQ
        acked[stream_id] = entry.last_seq

    for stream_id, seq in acked.items():
        fleet.wait(
            lambda s=stream_id: streams.read(s).owner == survivor.worker_id,
            10 * LEASE_SECONDS,
            f"{stream_id} taken over",
        )
        fleet.wait_seq(stream_id, seq + 5)
        assert upstream.stats(stream_id).from_seqs[-1] == seq + 1
    malformed = sum(
        sum(r.get(WorkerMetric.MALFORMED_FRAMES, []))
        for r in fleet.log_records(victim)
        if "_aws" in r
    )
    assert malformed >= 7  # every kind of garbage frame at least once, the huge seqs included


def dead_session(sessions: SessionStore, worker_id: str, vector: bytes) -> None:
    """A session that renewed once with ``vector`` and then never again."""
    now = wall_ms()
    sessions.create(WorkerInfo(worker_id, WorkerState.RUNNING, now, now + 1000, 2, 10, "gone", 1))
    sessions.renew(
        worker_id, expires_at_ms=now + 1001, now_ms=now, active_streams=2, checkpoints=vector
    )


def test_a_takeover_refuses_the_entry_of_another_stream_in_a_reused_slot(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """Session X died holding ``stale`` and ``other``, both at epoch 3 and both named on their
    items as slot 0: ``stale``'s release went unconfirmed and the slot went to ``other``, whose
    checkpoint (seq 500) the vector carries. The survivor resumes ``other`` at 501 and refuses
    that entry for ``stale``, which resumes at its item's 10 + 1, not 501 (490 seqs skipped).

    Session Y is an older worker's: its vector has the untagged format. Its entry is applied by
    epoch, as that worker would have done: ``legacy`` resumes at 41, not at its item's 1."""
    sessions = SessionStore(streams.dynamodb, streams.settings.table_name)
    stale, other, legacy = new_ids(3)
    x, y = f"x-{stale}/1-dead", f"y-{stale}/1-dead"
    for stream_id, owner, last_seq in ((stale, x, 10), (other, x, 0), (legacy, y, 0)):
        streams.put(stream_id, upstream.url_for(stream_id), held=(owner, 3, 0, last_seq))
    tagged = checkpoints.Checkpoint(3, 500, checkpoints.stream_tag(other))
    dead_session(sessions, x, checkpoints.encode([tagged]))
    dead_session(sessions, y, bytes([checkpoints.UNTAGGED_VERSION, 3, 40]))

    fleet.start()
    for stream_id, first in ((stale, 11), (other, 501), (legacy, 41)):
        fleet.wait(
            lambda s=stream_id: upstream.stats(s).from_seqs, 15 * LEASE_SECONDS, "taken over"
        )
        assert upstream.stats(stream_id).from_seqs[0] == first, stream_id
        assert streams.read(stream_id).epoch == 4
