"""The one bound on sequence numbers (streamlease.seqs): what passes, and what a refusal says."""

from __future__ import annotations

import pytest

from streamlease import checkpoints
from streamlease.seqs import JS_SAFE_MAX_SEQ, MAX_SEQ, is_valid_seq, seq_problem


@pytest.mark.parametrize("value", [0, 1, JS_SAFE_MAX_SEQ, MAX_SEQ])
def test_whole_numbers_from_0_to_2_63_minus_1_are_seqs(value: int) -> None:
    assert is_valid_seq(value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (MAX_SEQ + 1, "frame seq is above 2^63-1"),
        (2**70, "frame seq is above 2^63-1"),
        (float(2**70), "frame seq is above 2^63-1"),
        (1.2345678901234568e39, "frame seq is above 2^63-1"),
        (-1, "frame seq is negative"),
        (True, "frame seq is not an integer"),
        (1.0, "frame seq is not an integer"),
        ("7", "frame seq is not an integer"),
        (None, "frame seq is not an integer"),
    ],
)
def test_anything_else_is_refused_with_its_cause(value: object, problem: str) -> None:
    assert not is_valid_seq(value)
    assert seq_problem(value) == problem


def test_every_valid_seq_fits_the_checkpoint_vector() -> None:
    """The bound is below what the vector's varints carry: the largest seq and epoch round-trip
    in the worst-case size of a slot."""
    vector = checkpoints.encode([checkpoints.Checkpoint(MAX_SEQ, MAX_SEQ, 0xFFFF)])
    assert len(vector) - 1 == checkpoints.MAX_SLOT_BYTES
    assert checkpoints.decode(vector) == [(MAX_SEQ, MAX_SEQ, 0xFFFF)]
