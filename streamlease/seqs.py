"""The range of an upstream sequence number, checked once where a seq enters the system.

A seq travels far: into the stream's checkpoint (a varint in the session's checkpoint vector,
:mod:`streamlease.checkpoints`; a DynamoDB number on the stream item), into every sink record
(JSON for the file sink and Kinesis consumers) and back to the upstream when a stream resumes.
The bound is the smallest of what those carry:

- DynamoDB numbers hold 38 significant digits (2^126 and more): not the limit;
- the checkpoint vector's varints, and the ``uint64`` seq of a Kinesis aggregated message
  (:mod:`streamlease.kinesis_records`), hold 64 bits;
- sink consumers written in Java, Go, Rust or C# read a JSON number into a signed 64-bit
  integer: **2^63 − 1** is the limit, and the bound.

JavaScript is the exception: ``JSON.parse`` turns numbers above 2^53 − 1
(:data:`JS_SAFE_MAX_SEQ`) into the nearest double, so a JavaScript consumer of a feed whose seqs
go that high must parse them with a BigInt-aware reader. Feeds seen in practice (counters,
millisecond or microsecond timestamps) stay far below either bound.

A frame whose seq is outside ``0 .. MAX_SEQ`` is *malformed*: skipped and counted like a frame
without a seq. It never becomes a stream's ``last_seq``, so it can neither poison the checkpoint
vector nor a release, nor make every later frame look like a replayed duplicate.

A stream's checkpoint is the last seq its sink acknowledged, or :data:`NOTHING_DELIVERED`
before its first: "nothing delivered yet" is not "delivered up to 0", so a feed that starts at
seq 0 delivers seq 0. The value sits just below the range, so every rule written for seqs holds
for it unchanged: a seq is a replay when it is at or below the checkpoint (none is below
nothing), the resume point is the checkpoint + 1 (0), and a checkpoint never moves back (the
first delivery moves it up from nothing). A stream item written before this value existed says
0 where nothing was delivered; it keeps the meaning "delivered up to 0" (seq 0 is then taken
for a replay, as it was).
"""

from __future__ import annotations

from typing import Final

MAX_SEQ: Final = 2**63 - 1
"""The largest sequence number accepted (signed 64-bit)."""
JS_SAFE_MAX_SEQ: Final = 2**53 - 1
"""The largest seq a JavaScript consumer reads exactly with ``JSON.parse``."""
NOTHING_DELIVERED: Final = -1
"""The checkpoint (``last_seq``) of a stream whose sink has acknowledged no message yet: one
below the first seq, stored as such on the stream item."""


def is_valid_seq(value: object) -> bool:
    """True when ``value`` is an ``int`` (not a bool, not a float) in ``0 .. MAX_SEQ``."""
    return type(value) is int and 0 <= value <= MAX_SEQ


def delivered(last_seq: int) -> int | None:
    """The checkpoint ``last_seq`` as a reader should be shown it: the last seq delivered, or
    None when nothing was (:data:`NOTHING_DELIVERED`)."""
    return None if last_seq == NOTHING_DELIVERED else last_seq


def seq_problem(value: object) -> str:
    """Why ``value`` is not a valid seq, in words fit for ``last_error`` (for a value that
    :func:`is_valid_seq` refused; never the value itself, which came from the upstream).

    A JSON integer too large for a 64-bit parser (orjson reads it as a float) is reported as
    out of range, not as "not an integer".
    """
    if type(value) is int:
        return "frame seq is negative" if value < 0 else "frame seq is above 2^63-1"
    if type(value) is float and value.is_integer() and abs(value) > MAX_SEQ:
        return "frame seq is above 2^63-1"
    return "frame seq is not an integer"
