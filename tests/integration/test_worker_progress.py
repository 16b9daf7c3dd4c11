"""Stream health is progress, not only ownership: real worker processes, the moto server and the
upstream simulator. A stream whose frames are all undeliverable shows ``malformed`` with an
error that says what to check; a feed that goes quiet shows ``stalled``; a sink that keeps
refusing shows ``sink_failing``; the progress counters reach the item and stay after the
release."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from worker_helpers import Fleet, Streams, new_ids

from local.upstream_sim import UpstreamSimulator
from streamlease.model import StreamProgress
from streamlease.schema import ConnectionState, StreamAttr
from streamlease.seqs import NOTHING_DELIVERED

pytestmark = pytest.mark.slow


def state_of(streams: Streams, stream_id: str) -> tuple[str | None, str | None]:
    item = streams.item(stream_id)
    return item.get(StreamAttr.CONNECTION_STATE), item.get(StreamAttr.LAST_ERROR)


def progress_of(streams: Streams, stream_id: str) -> StreamProgress | None:
    return StreamProgress.from_item(streams.item(stream_id))


def test_a_feed_without_the_expected_seq_shows_malformed_with_what_to_check(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """Frames without ``seq`` on a stream started with the default seq path: soon after its
    connection (within a generous cap) the stream is ``malformed``, ``last_error`` names the
    cause and the setting, and the counters say frames came and none was delivered."""
    fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id, noseq=1))
    fleet.wait(
        lambda: state_of(streams, stream_id)[0] == ConnectionState.CONNECTED,
        20,
        "connected",
    )
    fleet.wait(
        lambda: state_of(streams, stream_id)[0] == ConnectionState.MALFORMED, 30, "malformed"
    )
    _, error = state_of(streams, stream_id)
    assert error is not None
    assert "no `seq` in" in error and "--seq-path none" in error
    progress = progress_of(streams, stream_id)
    assert progress is not None
    assert progress.received > 0 and progress.malformed > 0
    assert progress.delivered == 0
    assert fleet.seqs(stream_id) == []


def test_a_feed_that_goes_quiet_shows_stalled_within_its_idle_threshold(
    fleet: Fleet,
    streams: Streams,
    upstream: UpstreamSimulator,
    measured: Callable[[str, float, str], None],
) -> None:
    """``until_seq=20`` with ``idle_seconds: 2``: the stream delivers 20 messages, goes quiet,
    and is ``stalled`` (after its threshold plus the writer's second, about 3 s: measured; a
    generous cap is asserted), the time of its last message kept; it stays connected all
    along."""
    fleet.start()
    (stream_id,) = new_ids(1)
    streams.put(
        stream_id,
        upstream.url_for(stream_id, until_seq=20),
        profile={"idle_seconds": 2},
    )
    fleet.wait_seq(stream_id, 20)
    quiet_since = time.monotonic()
    fleet.wait(lambda: state_of(streams, stream_id)[0] == ConnectionState.STALLED, 30, "stalled")
    measured("quiet → stalled (threshold 2 s)", time.monotonic() - quiet_since, "s")
    _, error = state_of(streams, stream_id)
    assert error == "no frame for 2 s"
    progress = progress_of(streams, stream_id)
    assert progress is not None
    assert progress.delivered == 20
    last_received = max(int(r["received_at_ms"]) for r in fleet.records(stream_id))
    assert progress.last_message_at_ms == last_received
    assert upstream.stats(stream_id).accepted == 1


def test_progress_is_written_while_it_flows_and_kept_after_the_release(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator
) -> None:
    """With no state change, the counters still reach the item (at most every
    ``progress_seconds``); the release writes the final ones and they stay for an operator
    looking at the stopped stream."""
    fleet.start(progress_seconds=0.5)
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait_seq(stream_id, 5)
    first = fleet.wait(lambda: progress_of(streams, stream_id), 5, "progress written")
    fleet.wait(
        lambda: (
            (p := progress_of(streams, stream_id)) is not None and p.delivered > first.delivered
        ),
        5,
        "progress written again",
    )
    streams.stop(stream_id)
    fleet.wait(lambda: streams.read(stream_id).owner is None, 10, "released")
    item = streams.item(stream_id)
    final = StreamProgress.from_item(item)
    assert final is not None
    assert final.delivered == len(fleet.seqs(stream_id))
    assert final.received == final.delivered
    assert StreamAttr.CONNECTION_STATE not in item


def test_a_sink_that_keeps_refusing_shows_sink_failing(
    fleet: Fleet, streams: Streams, upstream: UpstreamSimulator, tmp_path: Path
) -> None:
    """The file sink's directory cannot be made (a file is in the way): every write fails,
    the stream shows ``sink_failing`` with the sink's error, nothing is acknowledged."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    fleet.start(sink_dir=str(blocker / "sink"))
    (stream_id,) = new_ids(1)
    streams.put(stream_id, upstream.url_for(stream_id))
    fleet.wait(
        lambda: state_of(streams, stream_id)[0] == ConnectionState.SINK_FAILING,
        20,
        "sink failing",
    )
    _, error = state_of(streams, stream_id)
    assert error is not None and "file sink write failed" in error
    assert streams.checkpoint(stream_id) == NOTHING_DELIVERED
