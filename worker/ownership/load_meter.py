"""What this worker's streams cost it: each holding's decayed message and byte rates, and the
process's CPU use (architecture §10).

Sampled from the holders' counters once per heartbeat, on the event loop, when the session
keeper copies what the next renewal carries: the data path only adds to two counters per
batch. The worker's load and CPU use ride on that renewal; the rebalancer reads the
per-stream loads to choose what to hand off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from streamlease import placement
from worker.ownership.holder import StreamHolder


@dataclass
class _Meter:
    epoch: int
    messages: placement.DecayedRate
    bytes: placement.DecayedRate
    seen_messages: int
    seen_bytes: int


class LoadMeter:
    """Per-stream decayed rates and the process's CPU use, sampled on demand."""

    def __init__(
        self,
        holders: Callable[[], Iterable[StreamHolder]],
        *,
        half_life_seconds: float = placement.LOAD_HALF_LIFE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        """``holders()``: the streams held now; ``clock``: monotonic seconds; ``cpu_clock``:
        the process's CPU seconds."""
        self._holders = holders
        self._half_life = half_life_seconds
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._meters: dict[str, _Meter] = {}
        self._seeds: dict[str, float] = {}
        self._cpu_at = (clock(), cpu_clock())
        self._cpu_permille: int | None = None
        self._sampled = False

    def seed(self, stream_id: str, load: float) -> None:
        """A rate known from the stream's previous holder (its handoff command): the next
        holding starts from it rather than from nothing."""
        if load > 0:
            self._seeds[stream_id] = load

    def sample(self) -> None:
        """Read every holder's counters and the CPU clock (the event loop's thread)."""
        now = self._clock()
        meters: dict[str, _Meter] = {}
        for holder in self._holders():
            if not holder.is_active:
                continue
            progress = holder.progress
            meter = self._meters.get(holder.stream_id)
            if meter is None or meter.epoch != holder.epoch:
                seed = self._seeds.pop(holder.stream_id, 0.0)
                meter = _Meter(
                    holder.epoch,
                    placement.DecayedRate(self._half_life, now, initial=seed),
                    placement.DecayedRate(self._half_life, now),
                    progress.received,
                    progress.received_bytes,
                )
            meter.messages.add(progress.received - meter.seen_messages, now)
            meter.bytes.add(progress.received_bytes - meter.seen_bytes, now)
            meter.seen_messages, meter.seen_bytes = progress.received, progress.received_bytes
            meters[holder.stream_id] = meter
        self._meters = meters
        cpu = self._cpu_clock()
        at, cpu_at = self._cpu_at
        if now > at:
            self._cpu_permille = round(1000 * max(0.0, cpu - cpu_at) / (now - at))
            self._cpu_at = (now, cpu)
        self._sampled = True

    def stream_load(self, stream_id: str) -> float:
        """One held stream's load (load units per second) as of the last sample; 0 unknown."""
        meter = self._meters.get(stream_id)
        if meter is None:
            return 0.0
        now = self._clock()
        return placement.stream_load(meter.messages.rate(now), meter.bytes.rate(now))

    def loads(self) -> dict[str, float]:
        """Every held stream's load as of the last sample."""
        return {stream_id: self.stream_load(stream_id) for stream_id in self._meters}

    def total(self) -> float | None:
        """The worker's load (load units per second); None before the first sample."""
        return sum(self.loads().values()) if self._sampled else None

    def renewal_figures(self) -> tuple[int | None, int | None]:
        """Sample, then ``(load in thousandths of a unit per second, CPU in thousandths of a
        core)`` for the next session renewal."""
        self.sample()
        total = self.total()
        return (None if total is None else round(total * 1000)), self._cpu_permille
