"""What the sink received, per stream: messages, gaps, duplicates and time without an owner.

Built on the invariant checker (:mod:`local.invariants`), which reads the file sink's JSONL
records and, when the workers wrote them, their lease events; this module adds the sink-side
measure of a handover — the silence between the last record of one epoch and the first record
of the next (``received_at_ms``) — and a compact table for ``make demo`` and the integration
tests. Time without an owner comes from the lease events; without them it is unknown and the
handover silence is the best estimate (it also includes the new owner's connect time).

A worker killed with SIGKILL writes no last event, so on paper it holds its leases until their
deadlines; when the reaper frees them sooner, the next owner would seem to overlap it. The local
stack's supervisor therefore records each worker exit (``exits.jsonl``: task id and the
monotonic time it saw the process gone), and the report ends that worker's open holdings there:
a dead process delivers nothing.

``python -m local.sink_report [STREAM_ID ...]`` prints the report of the local stack's file sink
(its state directory: ``STREAMLEASE_LOCAL_STATE_DIR``, default ``.local/``, or ``--state-dir``);
exit status 0 when no stream has a gap or a broken invariant (repeats are counted, not failed:
a ``kill -9`` leaves about a heartbeat of them), 1 otherwise, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local.invariants import Report, SinkRecord, check, load_events, load_records
from local.jsonl_tail import read_jsonl
from streamlease.lease_events import TERMINAL_KINDS, LeaseEvent, LeaseEventKind
from streamlease.schema import belongs_to_task
from streamlease.settings import Settings, env_name

EXIT_AS_EVENT = LeaseEventKind.FENCED
"""How a process exit enters the checker: it stopped delivering at that moment, as a fence."""
_OWNERSHIP_KINDS = frozenset({LeaseEventKind.ACQUIRED, LeaseEventKind.RENEWED, *TERMINAL_KINDS})


@dataclass(frozen=True)
class ProcessExit:
    """A worker process seen gone by the supervisor (one line of ``exits.jsonl``)."""

    task_id: str
    mono: float
    label: str = ""
    returncode: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessExit:
        """Parse one line. Raises ``KeyError``/``ValueError``/``TypeError`` when malformed."""
        return cls(
            task_id=str(data["task_id"]),
            mono=float(data["mono"]),
            label=str(data.get("label", "")),
            returncode=int(data.get("returncode", 0)),
        )

    def owns(self, worker_id: str) -> bool:
        """True when ``worker_id`` (any of its sessions) ran in this process's task."""
        return belongs_to_task(worker_id, self.task_id)


def load_exits(path: str | Path | None) -> list[ProcessExit]:
    """The exits recorded in ``path`` (none if it is missing); torn lines are skipped."""
    if path is None:
        return []
    exits, _ = read_jsonl([Path(path)], ProcessExit.from_dict)
    return exits


def end_at_exits(events: Sequence[LeaseEvent], exits: Sequence[ProcessExit]) -> list[LeaseEvent]:
    """``events`` plus a terminal event at each exit for every holding the process left open:
    one whose last event of ownership (acquired, renewed or terminal) is not terminal. What a
    holding logs after letting go (its ``handoff``) leaves it closed: ending it again at the
    exit would let the session renewals between count as holding it again."""
    last: dict[tuple[str, int, str], LeaseEvent] = {}
    for event in sorted(events, key=lambda e: e.mono):
        if event.event in _OWNERSHIP_KINDS:
            last[(event.stream_id, event.epoch, event.worker_id)] = event
    added = []
    for (stream_id, epoch, worker_id), event in last.items():
        if event.event in TERMINAL_KINDS or not stream_id:
            continue
        gone = next((x for x in exits if x.owns(worker_id) and x.mono >= event.mono), None)
        if gone is not None:
            added.append(LeaseEvent(EXIT_AS_EVENT, stream_id, epoch, worker_id, gone.mono))
    return [*events, *added]


@dataclass(frozen=True)
class StreamSummary:
    """One stream as the sink saw it."""

    stream_id: str
    messages: int
    """Records written, duplicates included."""
    first_seq: int | None
    last_seq: int | None
    missing: int
    """Seqs never delivered between the first expected one and the last delivered (must be 0)."""
    duplicates: int
    """Records whose seq had been delivered before (expected only after a crash takeover)."""
    epochs: int
    """Distinct fencing epochs that wrote records."""
    handovers: int
    """Times a newer epoch started writing."""
    unowned_seconds: float | None
    """Time the stream was wanted but nobody could deliver it; ``None`` without lease events."""
    longest_silence_ms: int
    """Longest gap in ``received_at_ms`` across a handover."""
    violations: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no invariant is broken (no gap, no overlap, no stale write)."""
        return not self.violations and self.missing == 0


@dataclass(frozen=True)
class SinkReport:
    """Every stream's summary plus the invariant checker's full report."""

    streams: list[StreamSummary]
    invariants: Report
    malformed_lines: int = 0
    has_lease_events: bool = field(default=False)

    @property
    def ok(self) -> bool:
        """True when every stream is clean."""
        return all(s.ok for s in self.streams)

    def stream(self, stream_id: str) -> StreamSummary:
        """The summary of one stream. Raises ``KeyError`` when the sink never saw it."""
        for summary in self.streams:
            if summary.stream_id == stream_id:
                return summary
        raise KeyError(stream_id)


def handover_silences_ms(records: Iterable[SinkRecord]) -> list[int]:
    """For each time a newer epoch starts writing: ms since the previous record (any epoch).

    Records are taken in ``received_at_ms`` order; a record of an epoch older than the newest
    seen does not open a handover.
    """
    silences = []
    newest_epoch: int | None = None
    last_ms: int | None = None
    for rec in sorted(records, key=lambda r: (r.received_at_ms, r.epoch)):
        if newest_epoch is not None and rec.epoch > newest_epoch and last_ms is not None:
            silences.append(max(rec.received_at_ms - last_ms, 0))
        newest_epoch = rec.epoch if newest_epoch is None else max(newest_epoch, rec.epoch)
        last_ms = rec.received_at_ms
    return silences


def build_report(
    sink_dir: str | Path,
    events_dir: str | Path | None = None,
    *,
    exits_path: str | Path | None = None,
    stream_ids: Sequence[str] | None = None,
    expected_first_seq: int | None = 1,
    records: Sequence[SinkRecord] | None = None,
    **check_kwargs: Any,
) -> SinkReport:
    """Read the sink files (and lease event logs, if given) and summarise each stream.
    ``records``: the records to summarise instead of the files under ``sink_dir`` (the
    Kinesis sink's, as read raw or through the consumer).

    ``exits_path``: the supervisor's ``exits.jsonl``; holdings of an exited worker end there.
    ``stream_ids`` limits the report to those streams (a stream the sink never saw is listed
    with 0 messages). ``expected_first_seq``: the seq a fresh stream starts at (the upstream
    simulator's 1), so a gap before the first record counts; ``None`` to skip that check.
    Other keyword arguments go to :func:`local.invariants.check`.
    """
    bad_records = 0
    if records is None:
        records, bad_records = load_records(sink_dir)
    events, bad_events = load_events(events_dir) if events_dir is not None else ([], 0)
    events = end_at_exits(events, load_exits(exits_path))
    wanted = set(stream_ids) if stream_ids is not None else None
    if wanted is not None:
        records = [r for r in records if r.stream_id in wanted]
        # Session renewals name no stream: they move the deadline of every stream held.
        events = [e for e in events if e.stream_id in wanted or not e.stream_id]
    invariants = check(
        events,
        records,
        expected_first_seq=expected_first_seq,
        malformed_lines=bad_records + bad_events,
        **check_kwargs,
    )
    by_stream: dict[str, list[SinkRecord]] = defaultdict(list)
    for rec in records:
        by_stream[rec.stream_id].append(rec)
    ids = sorted(wanted if wanted is not None else set(invariants.streams) | set(by_stream))
    summaries = []
    for stream_id in ids:
        found = invariants.streams.get(stream_id)
        recs = by_stream.get(stream_id, [])
        silences = handover_silences_ms(recs)
        has_events = found is not None and bool(found.segments)
        summaries.append(
            StreamSummary(
                stream_id=stream_id,
                messages=len(recs),
                first_seq=found.first_seq if found else None,
                last_seq=found.last_seq if found else None,
                missing=found.missing if found else 0,
                duplicates=(
                    found.duplicates + found.same_epoch_duplicates + found.orphan_duplicates
                    if found
                    else 0
                ),
                epochs=len({r.epoch for r in recs}),
                handovers=len(silences),
                unowned_seconds=found.unowned_seconds if has_events and found else None,
                longest_silence_ms=max(silences, default=0),
                violations=tuple(found.violations()) if found else (),
            )
        )
    return SinkReport(summaries, invariants, bad_records + bad_events, bool(events))


def format_report(report: SinkReport) -> str:
    """The report as a table with a verdict line, as ``make demo`` prints it."""
    header = (
        f"{'stream':<16} {'messages':>8} {'seqs':>13} {'gaps':>5} {'dups':>5} {'epochs':>6} "
        f"{'unowned':>8} {'silence':>8}"
    )
    lines = [header, "-" * len(header)]
    for s in report.streams:
        seqs = "-" if s.first_seq is None else f"{s.first_seq}..{s.last_seq}"
        unowned = "?" if s.unowned_seconds is None else f"{s.unowned_seconds:.2f}s"
        lines.append(
            f"{s.stream_id:<16} {s.messages:>8} {seqs:>13} {s.missing:>5} {s.duplicates:>5} "
            f"{s.epochs:>6} {unowned:>8} {s.longest_silence_ms / 1000:>7.2f}s"
        )
    total_missing = sum(s.missing for s in report.streams)
    total_dups = sum(s.duplicates for s in report.streams)
    total_messages = sum(s.messages for s in report.streams)
    worst = max((s.unowned_seconds or 0.0 for s in report.streams), default=0.0)
    lines.append("-" * len(header))
    lines.append(
        f"{len(report.streams)} streams, {total_messages} messages, {total_missing} missing, "
        f"{total_dups} duplicates, longest time without an owner {worst:.2f}s"
    )
    violations = [v for s in report.streams for v in s.violations]
    if violations:
        lines.append(f"VIOLATIONS ({len(violations)}):")
        lines += [f"  {v}" for v in violations]
    else:
        lines.append("no gaps, no overlapping owners, no stale writes")
    lines.append(
        "unowned: total time wanted but held by nobody (lease events); silence: longest pause "
        "in delivery across one handover (the sink's received_at_ms)"
    )
    return "\n".join(lines)


def report_json(report: SinkReport) -> dict[str, Any]:
    """The report as one JSON document: per stream its counts, and the verdict."""
    return {
        "ok": report.ok,
        "malformed_lines": report.malformed_lines,
        "streams": {
            s.stream_id: {
                "messages": s.messages,
                "first_seq": s.first_seq,
                "last_seq": s.last_seq,
                "gaps": s.missing,
                "repeats": s.duplicates,
                "epochs": s.epochs,
                "unowned_seconds": s.unowned_seconds,
                "violations": list(s.violations),
            }
            for s in report.streams
        },
    }


def first_seq(text: str) -> int | None:
    """``--first-seq``: a whole number, or ``any`` (seqs before the first record not counted)."""
    if text == "any":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number or 'any', got {text!r}") from None


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m local.sink_report``."""
    command = argparse.ArgumentParser(
        prog="python -m local.sink_report",
        description="Gaps and repeats per stream in the local stack's file sink (one JSONL file "
        "per stream under STATE_DIR/sink), judged with the workers' lease events. Exit status "
        "0 when no stream has a gap or a broken invariant (repeats are counted, not failed), "
        "1 otherwise.",
    )
    command.add_argument("stream_ids", nargs="*", metavar="STREAM_ID", help="only these streams")
    command.add_argument(
        "--state-dir",
        help=f"the stack's state directory (default: ${env_name('local_state_dir')}, else .local"
        " in the repository)",
    )
    command.add_argument(
        "--first-seq",
        type=first_seq,
        default=1,
        metavar="N|any",
        help="the seq a stream's first message has (default 1, the upstream simulator's), so "
        "messages missing before the first record count as a gap; 'any' to skip that",
    )
    command.add_argument("--json", action="store_true", help="one JSON document, not a table")
    return command


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report of the state directory's sink; the exit status is the verdict."""
    from local.stack_files import StackPaths

    args = parser().parse_args(argv)
    overrides = {"local_state_dir": args.state_dir} if args.state_dir else {}
    paths = StackPaths.for_settings(Settings.from_env(**overrides))
    if not paths.sink_dir.is_dir():
        print(f"no file sink at {paths.sink_dir}: has a stack run there?", file=sys.stderr)
        return 1
    report = build_report(
        paths.sink_dir,
        paths.events_dir,
        exits_path=paths.exits_file,
        stream_ids=args.stream_ids or None,
        expected_first_seq=args.first_seq,
    )
    print(json.dumps(report_json(report), sort_keys=True) if args.json else format_report(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
