"""The invariant checker's vocabulary: ownership segments, takeovers and the report.

See :mod:`local.invariants` for what is checked and how; :mod:`local.invariants.report` renders
a :class:`Report` as text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

EXITED: Final = "exited"
"""End reason of a segment cut short because its worker process was seen dead."""
EXPIRED: Final = "expired"
"""End reason of a segment that ran out (no terminal event before its deadline): a crash,
a freeze, or a holder that could not renew."""

Window = tuple[float, float | None]
"""A ``[start, end)`` span of monotonic seconds; ``end=None`` runs to the end of observation."""


@dataclass(frozen=True)
class Segment:
    """A span of monotonic seconds in which one holder (stream, epoch) could deliver."""

    stream_id: str
    epoch: int
    worker_id: str
    start: float
    end: float
    end_reason: str
    """The terminal kind that ended it (``released``, ``fenced``, ``lost``, ``stopped``:
    :data:`streamlease.lease_events.TERMINAL_KINDS`), :data:`EXPIRED` or :data:`EXITED`."""
    acquisition: int = 0
    """Which acquisition of this epoch by this worker (a lapsed holder may re-acquire its own
    lease without the epoch moving)."""


@dataclass(frozen=True)
class Overlap:
    """Two holders of one stream that could deliver at the same time."""

    first: Segment
    second: Segment

    @property
    def seconds(self) -> float:
        """How long both could deliver."""
        return min(self.first.end, self.second.end) - max(self.first.start, self.second.start)


@dataclass(frozen=True)
class SeqGap:
    """Seqs never delivered: ``missing`` numbers after ``after_seq`` (0: before the first)."""

    after_seq: int
    missing: int


@dataclass(frozen=True)
class Takeover:
    """A change of holder: the previous epoch's end and the next epoch's start."""

    from_epoch: int
    from_worker: str
    from_end_reason: str
    to_epoch: int
    to_worker: str
    unowned_seconds: float
    """Next start − previous end (negative: they overlapped)."""
    duplicates: int = 0
    """Records of ``to_epoch`` whose seq an earlier epoch had already delivered."""


@dataclass
class StreamReport:
    """Everything the checker found for one stream."""

    stream_id: str
    segments: list[Segment] = field(default_factory=list)
    overlaps: list[Overlap] = field(default_factory=list)
    epoch_conflicts: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    takeovers: list[Takeover] = field(default_factory=list)
    records: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    seq_gaps: list[SeqGap] = field(default_factory=list)
    duplicates: int = 0
    """Repeats across epochs (after a takeover); the per-takeover split is in ``takeovers``."""
    same_epoch_duplicates: int = 0
    """Repeats within one epoch that its holder never re-acquired: never expected."""
    orphan_duplicates: int = 0
    """Repeats in an epoch with no lease event (a log was lost): never expected."""
    late_writes: int = 0
    """Records of an older epoch after a newer one in the same file (a consumer drops them)."""
    records_outside_lease: int = 0
    """Records received outside every segment of their epoch, or of an unlogged epoch."""
    written_after_takeover: int = 0
    """Records of an epoch that the sink wrote after a newer epoch's holder had acquired the
    stream (by the sink's own write time): two holders delivered at once."""
    write_overlap_seconds: float = 0.0
    """The longest such overlap: write time − the newer holder's acquisition."""
    bad_payloads: int = 0
    unowned_seconds: float = 0.0
    unowned_periods: list[tuple[float, float]] = field(default_factory=list)

    @property
    def missing(self) -> int:
        """Total seqs never delivered."""
        return sum(gap.missing for gap in self.seq_gaps)

    def violations(self) -> list[str]:
        """The broken invariants, one line each (empty when the stream is clean)."""
        out = [
            f"overlap {o.seconds:.3f}s: epoch {o.first.epoch} ({o.first.worker_id}) and "
            f"epoch {o.second.epoch} ({o.second.worker_id})"
            for o in self.overlaps
        ]
        out += [f"epoch {e} claimed by {', '.join(ws)}" for e, ws in self.epoch_conflicts]
        out += [f"{g.missing} seq(s) missing after {g.after_seq}" for g in self.seq_gaps]
        if self.same_epoch_duplicates:
            out.append(f"{self.same_epoch_duplicates} duplicate(s) within one epoch")
        if self.orphan_duplicates:
            out.append(f"{self.orphan_duplicates} duplicate(s) in an epoch with no lease event")
        if self.records_outside_lease:
            out.append(f"{self.records_outside_lease} record(s) received outside their lease")
        if self.written_after_takeover:
            out.append(
                f"{self.written_after_takeover} record(s) written after a newer epoch acquired"
                f" (up to {self.write_overlap_seconds:.3f}s after)"
            )
        if self.bad_payloads:
            out.append(f"{self.bad_payloads} record(s) with a wrong payload")
        return [f"{self.stream_id}: {line}" for line in out]


@dataclass
class Report:
    """The checker's verdict over every stream it saw (as text:
    :func:`local.invariants.report.format_report`)."""

    streams: dict[str, StreamReport]
    malformed_lines: int = 0
    """Lines that did not parse (a worker killed mid-write leaves a torn line)."""
    observation_end: float = 0.0

    @property
    def overlaps(self) -> int:
        """Overlapping ownerships over all streams (must be 0)."""
        return sum(len(s.overlaps) + len(s.epoch_conflicts) for s in self.streams.values())

    @property
    def missing(self) -> int:
        """Seqs never delivered over all streams."""
        return sum(s.missing for s in self.streams.values())

    @property
    def duplicates(self) -> int:
        """Seqs delivered twice over all streams, any cause."""
        return sum(
            s.duplicates + s.same_epoch_duplicates + s.orphan_duplicates
            for s in self.streams.values()
        )

    @property
    def takeovers(self) -> list[Takeover]:
        """Every takeover of every stream."""
        return [t for s in self.streams.values() for t in s.takeovers]

    def violations(self) -> list[str]:
        """Every broken invariant (duplicates after a takeover are not, by themselves, one)."""
        return [line for s in sorted(self.streams) for line in self.streams[s].violations()]

    @property
    def ok(self) -> bool:
        """True when no invariant is broken."""
        return not self.violations()

    def duplicates_after(self, reasons: Iterable[str]) -> int:
        """Duplicates caused by takeovers whose previous holder ended for one of ``reasons``."""
        wanted = set(reasons)
        return sum(t.duplicates for t in self.takeovers if t.from_end_reason in wanted)
