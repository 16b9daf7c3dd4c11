"""A stream changed in place (the API's ``PATCH``, through the API's own repository) reaches its
holder in both liveness modes: a real worker process reconnects with the new URL under the same
lease and epoch, resuming after the last message it took in, with no seq missing.

Per-stream leases learn of a stop from their renewal, which says nothing of a change: without
the worker's own-streams read the new URL would wait for the next acquire, however long the
holder keeps the stream.
"""

from __future__ import annotations

import pytest
from worker_helpers import Fleet, Streams, assert_no_gap, new_ids

from lambdas.stream_repo import StreamRepo
from local.upstream_sim import UpstreamSimulator
from streamlease import aws
from streamlease.schema import Liveness
from streamlease.settings import Settings

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "liveness", [Liveness.SESSION, Liveness.STREAM], ids=["sessions", "per-stream"]
)
def test_a_url_changed_in_place_is_used_by_the_holder_at_once(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    settings: Settings,
    liveness: Liveness,
) -> None:
    worker = fleet.start(liveness=liveness)
    (stream_id,) = new_ids(1, prefix="chg")
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_seq(stream_id, 10)
    before = streams.read(stream_id)

    repo = StreamRepo(aws.client("dynamodb", settings), settings.table_name, liveness=liveness)
    moved = upstream.url_for(stream_id, host="localhost")
    changed, done = repo.change(stream_id, "test", ws_url=moved)
    assert done and changed.generation == before.generation + 1

    fleet.wait(
        lambda: upstream.stats(stream_id).last_host_header == f"localhost:{upstream.port}",
        10 * settings.heartbeat_seconds + 5,
        "the holder connected to the new URL",
    )
    checkpoint = streams.checkpoint(stream_id)
    fleet.wait_seq(stream_id, checkpoint + 10)

    after = streams.read(stream_id)
    assert (after.owner, after.epoch) == (before.owner, before.epoch)
    assert fleet.events("changed", stream_id), "no changed lease event"
    assert upstream.stats(stream_id).from_seqs[-1] > 1, "the new connection resumed"
    assert worker.alive
    assert_no_gap(fleet.seqs(stream_id))
