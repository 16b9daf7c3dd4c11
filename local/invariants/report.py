"""Plain-text rendering of an invariant :class:`~local.invariants.model.Report`.

What a failing chaos scenario or integration test prints: totals first, then every violation,
then one line per stream (streams with a violation first) and their takeovers.
"""

from __future__ import annotations

from collections import Counter

from local.invariants.model import Report, StreamReport


def summary_line(report: Report) -> str:
    """One line of totals: streams, takeovers, overlaps, missing, duplicates, unowned time."""
    takeovers = report.takeovers
    by_reason = Counter[str]()
    for t in takeovers:
        by_reason[t.from_end_reason] += t.duplicates
    dup_causes = ", ".join(f"{n} after {why}" for why, n in sorted(by_reason.items()) if n)
    unowned = [s.unowned_seconds for s in report.streams.values()]
    parts = [
        f"{len(report.streams)} streams",
        f"{sum(s.records for s in report.streams.values())} records",
        f"{len(takeovers)} takeovers",
        f"{report.overlaps} overlaps",
        f"{report.missing} missing seqs",
        f"{report.duplicates} duplicates" + (f" ({dup_causes})" if dup_causes else ""),
        f"unowned {sum(unowned):.2f}s total, max {max(unowned, default=0.0):.2f}s per stream",
    ]
    late = sum(s.late_writes for s in report.streams.values())
    if late:
        parts.append(f"{late} late writes (older epoch after newer; a consumer drops them)")
    if report.malformed_lines:
        parts.append(f"{report.malformed_lines} malformed lines")
    return "invariants: " + ", ".join(parts)


def _stream_line(s: StreamReport) -> str:
    epochs = sorted({seg.epoch for seg in s.segments})
    seqs = "-" if s.first_seq is None else f"{s.first_seq}..{s.last_seq}"
    dups = s.duplicates + s.same_epoch_duplicates + s.orphan_duplicates
    return (
        f"  {s.stream_id:<24} {s.records:>7} {seqs:>13} {len(epochs):>6} {len(s.takeovers):>9}"
        f" {dups:>5} {s.missing:>7} {s.unowned_seconds:>9.2f}"
    )


def format_report(report: Report, *, max_streams: int = 40) -> str:
    """The whole report as text; at most ``max_streams`` stream lines (violating ones first)."""
    lines = [summary_line(report)]
    violations = report.violations()
    if violations:
        lines.append(f"VIOLATIONS ({len(violations)}):")
        lines += [f"  {v}" for v in violations]
    else:
        lines.append("no invariant violated")
    streams = sorted(report.streams.values(), key=lambda s: (not s.violations(), s.stream_id))
    lines.append(
        f"  {'stream':<24} {'records':>7} {'seqs':>13} {'epochs':>6} {'takeovers':>9}"
        f" {'dups':>5} {'missing':>7} {'unowned_s':>9}"
    )
    for s in streams[:max_streams]:
        lines.append(_stream_line(s))
        if s.violations() or any(t.duplicates for t in s.takeovers):
            for t in s.takeovers:
                lines.append(
                    f"      epoch {t.from_epoch} ({t.from_worker}, {t.from_end_reason}) -> "
                    f"{t.to_epoch} ({t.to_worker}) after {t.unowned_seconds:.3f}s, "
                    f"{t.duplicates} dup"
                )
    if len(streams) > max_streams:
        lines.append(f"  ... {len(streams) - max_streams} more streams")
    return "\n".join(lines)
