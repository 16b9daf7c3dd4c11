"""The reader's guarantee, one message at a time (pure).

Kinesis cannot check a fencing token, so the token is checked where the data is read
(architecture §4, "Fencing"). Every message carries (stream id, epoch, seq) and one stream's
messages reach one shard in the order they were written; per stream the reader keeps the
highest epoch seen ``E`` and the last seq emitted ``W`` (:class:`~.codec.Watermark`):

- a message of an epoch below ``E`` is **stale** (a holder that lost the stream, frozen between
  its last fencing check and its write): dropped;
- a message whose seq came from the upstream (:func:`streamlease.kinesis_records
  .seq_from_upstream`) names the same content under every epoch: at or below ``W`` it is a
  **repeat** (a takeover resuming from an older checkpoint, a retried write): dropped;
  above, it is emitted, and one more than ``W + 1`` is a **gap** of ``seq − W − 1`` missing
  seqs (counted, still emitted);
- a worker-numbered seq (``seq: none``) is unique only within one epoch: within ``E`` the
  numbering only grows, so a seq at or below ``W`` is a repeat; a new epoch starts from
  whatever seq its holder resumed at, and is emitted from there. Its numbering continues from
  the checkpoint, so a takeover may number content again (an **overlap** of ``W − seq + 1``)
  or leave numbers out (a **skip**): counted apart from gaps, never hidden.

``E`` rises with every newer epoch seen, a dropped repeat's too: the newest holder's epoch
fences the older ones from the first of its records on.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from streamlease.consumer.codec import Watermark


class Verdict(Enum):
    """What the reader does with one message."""

    EMIT = "emit"
    REPEAT = "repeat"
    STALE = "stale"


class Judgement(NamedTuple):
    """One message judged: the verdict, the stream's watermark after it, and what it
    reveals: seqs missing before it (a gap within the seq's numbering), and for a new epoch of
    a worker-numbered stream the seqs numbered again (``overlap``) or left out (``skipped``)."""

    verdict: Verdict
    mark: Watermark
    missing: int = 0
    overlap: int = 0
    skipped: int = 0


def judge(mark: Watermark | None, epoch: int, seq: int, upstream_seq: bool) -> Judgement:
    """The verdict on a message of ``epoch`` and ``seq`` for a stream at ``mark`` (None: the
    stream was never seen, so nothing is known to be missing before it). ``upstream_seq``:
    the seq came from the upstream (else the worker numbered it)."""
    if mark is None:
        return Judgement(Verdict.EMIT, Watermark(epoch, seq))
    if epoch < mark.epoch:
        return Judgement(Verdict.STALE, mark)
    newer = epoch > mark.epoch
    if upstream_seq or not newer:
        if seq <= mark.seq:
            return Judgement(Verdict.REPEAT, Watermark(epoch, mark.seq) if newer else mark)
        return Judgement(Verdict.EMIT, Watermark(epoch, seq), missing=seq - mark.seq - 1)
    # A new holding of a worker-numbered stream: its numbering restarts at its checkpoint.
    return Judgement(
        Verdict.EMIT,
        Watermark(epoch, seq),
        overlap=max(0, mark.seq - seq + 1),
        skipped=max(0, seq - mark.seq - 1),
    )
