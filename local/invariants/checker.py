"""The invariant checks: from lease events and sink records, a :class:`Report` per stream.

What each check finds is listed in :mod:`local.invariants`; delivery segments come from
:mod:`local.invariants.ownership`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from local.invariants.inputs import SinkRecord, load_events, load_records
from local.invariants.model import (
    EXITED,
    Overlap,
    Report,
    Segment,
    SeqGap,
    StreamReport,
    Takeover,
    Window,
)
from local.invariants.ownership import HolderKey, by_holder, segments_of
from streamlease.lease_events import LeaseEvent

WRITE_TOLERANCE_SECONDS: Final = 0.002
"""Slack when placing a sink's write time on the monotonic clock: the stamps are whole
milliseconds, and a worker's wall-to-monotonic offset is a median of such stamps."""


def check(
    events: Iterable[LeaseEvent],
    records: Iterable[SinkRecord],
    *,
    wanted: Mapping[str, Sequence[Window]] | None = None,
    observation_end: float | None = None,
    expected_first_seq: int | None = None,
    verify_payload: Callable[[SinkRecord], bool] | None = None,
    tolerance_seconds: float = 0.0,
    worker_exits: Mapping[str, float] | None = None,
    clock_tolerance_seconds: float = 0.02,
    write_tolerance_seconds: float = WRITE_TOLERANCE_SECONDS,
    malformed_lines: int = 0,
) -> Report:
    """Check the invariants; returns a :class:`Report` (never raises on bad data: reports it).

    ``wanted``: per stream, the windows (monotonic seconds) in which it was meant to run, for
    unowned time; streams not listed are wanted from their first acquisition to
    ``observation_end`` (default: the latest event). ``expected_first_seq``: the seq a fresh
    stream starts at, to catch a gap before the first record. ``tolerance_seconds``: overlaps up
    to this long are ignored (0: none, the clock is shared). ``worker_exits``: worker id → a
    monotonic time by which its process had certainly exited. ``clock_tolerance_seconds``: slack
    when placing a record's wall-clock receive time on the monotonic clock;
    ``write_tolerance_seconds``: the same for its write time (only the stamps' rounding).
    """
    all_events = list(events)
    holdings = by_holder(all_events)
    end = observation_end
    if end is None:
        end = max((ev.mono for ev in all_events), default=0.0)
    offsets = _wall_offsets(all_events)
    records_by_stream: dict[str, list[SinkRecord]] = defaultdict(list)
    for rec in records:
        records_by_stream[rec.stream_id].append(rec)

    streams: dict[str, StreamReport] = {}
    stream_ids = {k[0] for k in holdings} | set(records_by_stream) | set(wanted or {})
    for stream_id in sorted(stream_ids):
        report = StreamReport(stream_id)
        holders = {k: v for k, v in holdings.items() if k[0] == stream_id}
        for (_, _, worker), evs in sorted(holders.items(), key=lambda kv: kv[0][1]):
            segments = segments_of(evs)
            exit_mono = (worker_exits or {}).get(worker)
            if exit_mono is not None:
                segments = [_clip(seg, exit_mono) for seg in segments if seg.start < exit_mono]
            report.segments.extend(segments)
        report.segments.sort(key=lambda s: (s.start, s.epoch))
        _find_overlaps(report, tolerance_seconds)
        _find_epoch_conflicts(report, holders)
        _find_takeovers(report)
        stream_records = records_by_stream.get(stream_id, [])
        _check_receive_times(report, stream_records, offsets, clock_tolerance_seconds)
        _check_write_times(report, stream_records, offsets, write_tolerance_seconds)
        _check_records(report, stream_records, expected_first_seq)
        if verify_payload is not None:
            report.bad_payloads = sum(
                1 for r in records_by_stream.get(stream_id, []) if not verify_payload(r)
            )
        windows = (wanted or {}).get(stream_id)
        if windows is None:
            windows = [(report.segments[0].start, None)] if report.segments else []
        _unowned(report, windows, end)
        streams[stream_id] = report
    return Report(streams, malformed_lines=malformed_lines, observation_end=end)


def _clip(seg: Segment, exit_mono: float) -> Segment:
    if seg.end <= exit_mono:
        return seg
    return dataclasses.replace(seg, end=exit_mono, end_reason=EXITED)


def _wall_offsets(events: Sequence[LeaseEvent]) -> dict[str, float]:
    """Per worker, wall seconds − monotonic seconds (the median over its events)."""
    samples: dict[str, list[float]] = defaultdict(list)
    for ev in events:
        if ev.wall_ms > 0:
            samples[ev.worker_id].append(ev.wall_ms / 1000 - ev.mono)
    return {w: statistics.median(v) for w, v in samples.items()}


def _check_receive_times(
    report: StreamReport,
    records: Sequence[SinkRecord],
    offsets: Mapping[str, float],
    tolerance: float,
) -> None:
    """Every record must have been received inside a segment of its own epoch.

    Without any lease event for the stream there is nothing to place records in: unknown, not
    a violation (a sink read on its own, as ``make demo`` may do).
    """
    if not report.segments:
        return
    by_epoch: dict[int, list[Segment]] = defaultdict(list)
    for seg in report.segments:
        by_epoch[seg.epoch].append(seg)
    for rec in records:
        segments = by_epoch.get(rec.epoch)
        if not segments:
            report.records_outside_lease += 1
            continue
        offset = offsets.get(rec.worker_id)
        if offset is None or rec.received_at_ms <= 0:
            continue  # no wall-clock evidence to place it
        received = rec.received_at_ms / 1000 - offset
        if not any(s.start - tolerance <= received <= s.end + tolerance for s in segments):
            report.records_outside_lease += 1


def _check_write_times(
    report: StreamReport,
    records: Sequence[SinkRecord],
    offsets: Mapping[str, float],
    tolerance: float,
) -> None:
    """No record of an epoch may have been written after a newer epoch's holder acquired the
    stream, however short the overlap: judged by the sink's own write time (records without one
    are not judged), not by receive time or file order."""
    taken_over_at: dict[int, float] = {}  # epoch -> earliest start of any newer epoch
    for rec in records:
        offset = offsets.get(rec.worker_id)
        if offset is None or rec.written_at_ms <= 0:
            continue
        newer = taken_over_at.get(rec.epoch)
        if newer is None:
            newer = min((s.start for s in report.segments if s.epoch > rec.epoch), default=math.inf)
            taken_over_at[rec.epoch] = newer
        late = rec.written_at_ms / 1000 - offset - newer
        if late > tolerance:
            report.written_after_takeover += 1
            report.write_overlap_seconds = max(report.write_overlap_seconds, late)


def _find_overlaps(report: StreamReport, tolerance: float) -> None:
    segs = report.segments
    for i, a in enumerate(segs):
        for b in segs[i + 1 :]:
            if b.start >= a.end:
                break
            if b.epoch != a.epoch and min(a.end, b.end) - b.start > tolerance:
                report.overlaps.append(Overlap(a, b))


def _find_epoch_conflicts(
    report: StreamReport, holders: Mapping[HolderKey, list[LeaseEvent]]
) -> None:
    workers_by_epoch: dict[int, set[str]] = defaultdict(set)
    for _, epoch, worker in holders:
        workers_by_epoch[epoch].add(worker)
    report.epoch_conflicts = [
        (epoch, tuple(sorted(ws))) for epoch, ws in sorted(workers_by_epoch.items()) if len(ws) > 1
    ]


def _find_takeovers(report: StreamReport) -> None:
    """Consecutive acquisitions: how the previous one ended, how long nobody could deliver."""
    by_acquisition: dict[tuple[int, str, int], list[Segment]] = defaultdict(list)
    for seg in report.segments:
        by_acquisition[(seg.epoch, seg.worker_id, seg.acquisition)].append(seg)
    ordered = sorted(by_acquisition.values(), key=lambda segs: (segs[0].epoch, segs[0].start))
    for prev, nxt in itertools.pairwise(ordered):
        last = max(prev, key=lambda s: s.end)
        first = min(nxt, key=lambda s: s.start)
        report.takeovers.append(
            Takeover(
                from_epoch=last.epoch,
                from_worker=last.worker_id,
                from_end_reason=last.end_reason,
                to_epoch=first.epoch,
                to_worker=first.worker_id,
                unowned_seconds=first.start - last.end,
            )
        )


def _check_records(
    report: StreamReport, records: Sequence[SinkRecord], expected_first_seq: int | None
) -> None:
    report.records = len(records)
    if not records:
        return
    # Late writes: within one file, an epoch lower than one already appended. A consumer that
    # fences by epoch drops them; everything below is counted on what it keeps.
    newest: dict[str, int] = {}
    kept: list[SinkRecord] = []
    for rec in records:
        if rec.epoch < newest.get(rec.source, rec.epoch):
            report.late_writes += 1
            continue
        newest[rec.source] = max(newest.get(rec.source, rec.epoch), rec.epoch)
        kept.append(rec)
    records = kept
    if not records:
        return
    # Duplicates, attributed to the epoch that repeated a seq (epochs in order, file order within).
    order = sorted(range(len(records)), key=lambda i: (records[i].epoch, i))
    first_epoch_of: dict[int, int] = {}
    dup_by_epoch: dict[int, int] = defaultdict(int)
    same_epoch: dict[int, int] = defaultdict(int)
    for i in order:
        rec = records[i]
        seen = first_epoch_of.get(rec.seq)
        if seen is None:
            first_epoch_of[rec.seq] = rec.epoch
        elif seen == rec.epoch:
            same_epoch[rec.epoch] += 1
        else:
            dup_by_epoch[rec.epoch] += 1
    # Repeats inside an epoch are a bug unless the holder re-acquired that epoch after a lapse
    # (then the re-acquisition replayed from the checkpoint, like a takeover would).
    reacquired = {
        t.to_epoch: i for i, t in enumerate(report.takeovers) if t.from_epoch == t.to_epoch
    }
    for epoch, count in same_epoch.items():
        if epoch in reacquired:
            i = reacquired[epoch]
            report.takeovers[i] = dataclasses.replace(report.takeovers[i], duplicates=count)
            report.duplicates += count
        else:
            report.same_epoch_duplicates += count
    entered = {t.to_epoch: i for i, t in enumerate(report.takeovers) if t.from_epoch != t.to_epoch}
    for epoch, count in dup_by_epoch.items():
        if epoch in entered:
            i = entered[epoch]
            report.takeovers[i] = dataclasses.replace(report.takeovers[i], duplicates=count)
            report.duplicates += count
        else:
            report.orphan_duplicates += count
    seqs = sorted(first_epoch_of)
    report.first_seq, report.last_seq = seqs[0], seqs[-1]
    if expected_first_seq is not None and seqs[0] > expected_first_seq:
        report.seq_gaps.append(SeqGap(expected_first_seq - 1, seqs[0] - expected_first_seq))
    for a, b in itertools.pairwise(seqs):
        if b - a > 1:
            report.seq_gaps.append(SeqGap(a, b - a - 1))


def _unowned(report: StreamReport, windows: Sequence[Window], end: float) -> None:
    covered = _union([(s.start, s.end) for s in report.segments])
    for w_start, w_end in windows:
        stop = end if w_end is None else w_end
        cursor = w_start
        for c_start, c_end in covered:
            if c_end <= cursor:
                continue
            if c_start >= stop:
                break
            if c_start > cursor:
                report.unowned_periods.append((cursor, c_start))
            cursor = max(cursor, c_end)
            if cursor >= stop:
                break
        if cursor < stop:
            report.unowned_periods.append((cursor, stop))
    report.unowned_seconds = sum(b - a for a, b in report.unowned_periods)


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def check_files(
    event_paths: str | Path | Iterable[str | Path],
    sink_paths: str | Path | Iterable[str | Path],
    **kwargs: Any,
) -> Report:
    """:func:`load_events` + :func:`load_records` + :func:`check` (``kwargs`` go to ``check``)."""
    events, bad_events = load_events(event_paths)
    records, bad_records = load_records(sink_paths)
    return check(events, records, malformed_lines=bad_events + bad_records, **kwargs)
