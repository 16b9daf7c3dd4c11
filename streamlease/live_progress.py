"""How far a held stream got and how fast, read from what its holder writes anyway.

A stream's delivered seq is carried by every renewal of its lease (architecture §4): the
session's checkpoint vector, renewed once a heartbeat for all its streams, or the per-stream
lease item's ``last_seq``, renewed with it. So an answer read now is at most one heartbeat old,
with no write of its own. A *rate* needs a second, earlier reading of the same holding: the
holder's last progress write, which records the seq acknowledged when it was taken
(``progress_seq``, at ``progress_at_ms``; the first one is written right after the holding's
first acknowledged batch, the next ones every ``progress_seconds``). The rate is the seq
difference between the two over the time between them — a one-call answer for ``get`` and
``ls``, averaged over up to ``progress_seconds``, and as of the newer of the two. Right after a
report the renewal is the older reading; the pair counts all the same, so only readings less
than :data:`MIN_RATE_WINDOW_MS` apart give no rate.

The counters that only the progress write carries (received, malformed, gaps, control) have
no live reading: they are shown with their age, never as a rate.

Seqs count messages when the feed numbers each one: a feed that skips numbers reads faster than
it delivers (its gaps say so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from streamlease import checkpoints, rules
from streamlease.model import Stream, WorkerInfo
from streamlease.seqs import NOTHING_DELIVERED

MIN_RATE_WINDOW_MS: Final = 1_000
"""Two readings closer than this give no rate (one message more or less would swing it)."""


@dataclass(frozen=True)
class Reading:
    """The seq the sink had acknowledged at wall time ``at_ms`` (epoch ms)."""

    seq: int
    at_ms: int


@dataclass(frozen=True)
class LiveProgress:
    """A stream's delivered seq and rate as its holder's writes tell them.

    ``seq``: the last acknowledged seq (:data:`~streamlease.seqs.NOTHING_DELIVERED` when none);
    ``seq_at_ms``: when that reading was taken (epoch ms; None when there is none);
    ``rate_per_s``: seqs per second between ``rate_since_ms`` and ``seq_at_ms`` (None when no
    two readings of this holding lie :data:`MIN_RATE_WINDOW_MS` apart)."""

    seq: int
    seq_at_ms: int | None
    rate_per_s: float | None
    rate_since_ms: int | None


def renewal_reading(stream: Stream, session: WorkerInfo | None, lease_ms: int) -> Reading | None:
    """The seq the last renewal of ``stream``'s lease carried, and when it was sent.

    A lease attached to a session: its slot's entry in ``session``'s vector (only an entry of
    this holding's epoch and stream counts), at the session's last heartbeat. A per-stream
    lease: the item's ``last_seq``, at its expiry minus ``lease_ms`` (each renewal writes send
    time + lease). None when the stream is free or the renewal carried nothing."""
    if stream.owner is None:
        return None
    if stream.held_by_session:
        if session is None or stream.slot is None:
            return None
        entry = checkpoints.entry_at(session.checkpoints, stream.slot)
        seq = rules.checkpoint_for(entry, stream.stream_id, stream.epoch)
        return None if seq is None else Reading(seq, session.heartbeat_at_ms)
    if stream.last_seq == NOTHING_DELIVERED or stream.expires_at_ms <= 0:
        return None
    return Reading(stream.last_seq, stream.expires_at_ms - lease_ms)


def progress_reading(stream: Stream) -> Reading | None:
    """The seq the current holding's last progress write recorded, and when it was taken."""
    progress = stream.current_progress
    if progress is None or progress.seq is None:
        return None
    return Reading(progress.seq, progress.at_ms)


def live_progress(stream: Stream, session: WorkerInfo | None, lease_ms: int) -> LiveProgress:
    """``stream``'s delivered seq and rate (see the module docstring); ``session``: its owner's
    worker item when the lease is attached to one; ``lease_ms``: the lease length (ms)."""
    renewal = renewal_reading(stream, session, lease_ms)
    progress = progress_reading(stream)
    readings = [r for r in (renewal, progress) if r is not None]
    if not readings:
        return LiveProgress(stream.last_seq, None, None, None)
    newest = max(readings, key=lambda r: (r.at_ms, r.seq))
    seq = max(stream.last_seq, *(r.seq for r in readings))
    rate = since = None
    if renewal is not None and progress is not None:
        # Usually the report is the older reading; right after a report the renewal is.
        older, newer = sorted((progress, renewal), key=lambda r: r.at_ms)
        window_ms = newer.at_ms - older.at_ms
        if window_ms >= MIN_RATE_WINDOW_MS and newer.seq >= older.seq:
            rate = (newer.seq - older.seq) * 1000 / window_ms
            since = older.at_ms
    return LiveProgress(seq, newest.at_ms, rate, since)
