"""Summary statistics shared by the worker's metric logs and the benchmarks."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (``p`` from 0 to 100) of ``values``, in any order.

    Linear interpolation between the two nearest ranks (NumPy's default ``linear`` method, R's
    type 7), not nearest-rank: the 50th of ``1..100`` is 50.5 and the 99th is 99.01. NaN when
    ``values`` is empty.
    """
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
