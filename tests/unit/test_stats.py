"""Percentiles (streamlease.stats): one definition for the worker's logs and the benchmarks."""

from __future__ import annotations

import math

import pytest

from streamlease.stats import percentile


def test_percentiles_interpolate_between_the_nearest_ranks() -> None:
    """Linear interpolation: the median of 1..4 is 2.5, not a sample."""
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)


def test_the_ends_are_the_smallest_and_largest_value() -> None:
    """p = 0 and p = 100 are the minimum and the maximum, in whatever order values come."""
    values = [5.0, 1.0, 3.0]
    assert (percentile(values, 0), percentile(values, 100)) == (1.0, 5.0)


def test_one_value_is_every_percentile() -> None:
    """A single sample is its own p50 and p99."""
    assert percentile([7.0], 50) == percentile([7.0], 99) == 7.0


def test_no_values_have_no_percentile() -> None:
    """NaN, not 0: nothing measured is not a measurement of zero."""
    assert math.isnan(percentile([], 50))
