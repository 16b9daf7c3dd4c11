"""Invariant checker: from the workers' lease events and the sink's records, did the system keep
its promises?

Inputs (both JSONL, written by the worker; :mod:`local.invariants.inputs` reads them):

- lease events (``Settings.lease_event_log``), in the format of :mod:`streamlease.lease_events`:
  ``deadline_mono`` is the holder's self-fencing deadline, and a ``session_renewed`` event (no
  stream) counts as a renewal of every stream its worker id (the session) holds at that moment.
  ``mono`` is ``time.monotonic()``, one clock for every process of a Linux machine, so events
  of different workers compare directly.
- sink records (file sink, one JSONL file per stream): :class:`streamlease.sink_fields.SinkField`,
  including ``written_at_ms``, the time the sink appended the record's batch (taken in the
  sink's own thread right after its last fencing check).

What it reports, per stream (:mod:`local.invariants.checker`):

- **ownership segments** (:mod:`local.invariants.ownership`): while a holder may deliver. A
  segment opens at ``acquired`` (or at a ``renewed`` after the holder had lapsed) and ends at the
  first of: a terminal event (``released``, ``fenced``, ``lost``, ``stopped``), the latest known
  ``deadline_mono`` — a holder never delivers after its deadline — or the moment its process was
  seen dead (``worker_exits``: the reaper frees a dead task's leases before their deadlines).
- **overlaps** (must be none): two different epochs whose segments intersect.
- **epoch conflicts** (must be none): one epoch claimed by two workers.
- **seq gaps** (must be none where the upstream replays): seqs missing between the first and the
  last delivered one, and before the first when ``expected_first_seq`` is given.
- **duplicates**: seqs delivered again, attributed to the takeover into the epoch that repeated
  them (with how the previous holder ended); repeats inside one epoch are counted separately.
- **records outside a lease** (must be none): a record whose ``received_at_ms`` (wall clock,
  mapped onto the monotonic clock through the holder's own events) lies outside every segment
  of its epoch, or of an epoch with no lease event at all.
- **writes after a takeover** (must be none): a record the sink wrote (``written_at_ms``, mapped
  onto the monotonic clock through its worker's events) after a newer epoch's holder had
  acquired the stream, however short the overlap. Receive time cannot show this: a batch
  received inside the lease may be written seconds later (the check comes before the write).
- **late writes**: a record of an older epoch appended after a newer epoch's record in the same
  sink file. A holder frozen (SIGSTOP, a long GC pause) in the instant between the sink's last
  deadline check and the append appends such a record when it wakes (its write time, taken
  right after the check, may still read as inside its lease); no in-process check can prevent
  it, which is why every record carries its epoch: a
  consumer drops records older than the newest epoch it has seen. Gaps and duplicates are
  counted on what such a consumer keeps, so a late write whose message the new holder did not
  replay shows up as a gap.
- **unowned time**: the part of the wanted window (default: first acquisition → end of the
  observation) no segment covers.

The verdict is a :class:`Report` (:mod:`local.invariants.model`), rendered as text by
:func:`format_report` (:mod:`local.invariants.report`). Imports go one way: ``ownership`` and
``report`` import ``model``, ``checker`` imports ``model``, ``ownership`` and ``inputs``, and
nothing imports back. This package re-exports what callers use.
"""

from local.invariants.checker import check, check_files
from local.invariants.inputs import KinesisView, SinkRecord, load_events, load_kinesis, load_records
from local.invariants.model import (
    EXITED,
    EXPIRED,
    Overlap,
    Report,
    Segment,
    SeqGap,
    StreamReport,
    Takeover,
    Window,
)
from local.invariants.ownership import by_holder, current_owners, segments_of
from local.invariants.report import format_report, summary_line

__all__ = [
    "EXITED",
    "EXPIRED",
    "KinesisView",
    "Overlap",
    "Report",
    "Segment",
    "SeqGap",
    "SinkRecord",
    "StreamReport",
    "Takeover",
    "Window",
    "by_holder",
    "check",
    "check_files",
    "current_owners",
    "format_report",
    "load_events",
    "load_kinesis",
    "load_records",
    "segments_of",
    "summary_line",
]
