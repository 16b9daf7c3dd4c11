"""The fleet model's calibration runs the real stores against moto: it must keep working as the
stores and the item formats change (the model's figures all rest on it), and what it measures
must say what each design's indexes cost."""

from __future__ import annotations

import pytest

from bench.fleet_model.calibrate import calibrate
from streamlease import checkpoints
from streamlease.indexes import BY_SHARD_EXPIRY, BY_STATE_EXPIRY
from streamlease.settings import Settings


def test_calibration_measures_both_designs_on_the_real_stores(aws_settings: Settings) -> None:
    units = calibrate(aws_settings, {"flat": BY_SHARD_EXPIRY})
    today, flat = units["today"], units["flat"]

    # A takeover (owner to owner) moves the previous design's orphan-index key, not the new one's.
    assert today.take_from.get(BY_STATE_EXPIRY.name, 0) > 0
    assert flat.take_from.get(BY_SHARD_EXPIRY.name, 0) == 0
    # A session's acquire removes the stream from the new orphan index.
    assert flat.acquire.get(BY_SHARD_EXPIRY.name, 0) > 0
    # One held stream's slot in the vector as the current format writes it: an epoch, its tag
    # and a seq of ten million (1 + 2 + 4 bytes; the version byte spread over 1,000 streams).
    assert flat.vector_bytes_per_stream == pytest.approx(1 + checkpoints.TAG_BYTES + 4, abs=0.05)
    assert today.vector_bytes_per_stream == flat.vector_bytes_per_stream
