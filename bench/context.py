"""The stage every measuring section shares: one moto server, fresh resources per preset, scale.

Three presets, compared side by side in one run:

- ``sessions``: our defaults (``liveness = session``, architecture §4a);
- ``per-stream``: our defaults with ``liveness = stream`` (one renewal per held stream, §4b);
- ``reference (seed design)``: per-stream plus the seed's slow reconcile (3 leases), releases
  without a handoff command and no acquire scheduled for suspect leases.

A section runs the presets that differ in what it measures: write cost, CPU and scale run
sessions and per-stream (the reference renews exactly as per-stream does); failover and stop run
all three. All timers are scaled by one factor, the run's ``--scale`` (default 0.1: lease 2 s =
production's 20 s / 10), the same for every preset; figures are reported in seconds *and* in
leases so they translate back to production.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.common import Progress
from local.moto_process import MotoProcess
from local.resources import create_resources
from local.testbed import Testbed
from local.worker_process import (
    PRODUCTION_LEASE_SECONDS,
    reference_settings,
    scaled_settings,
    use_dummy_aws_credentials,
)
from streamlease.schema import Liveness
from streamlease.settings import Settings

DEFAULT_SCALE: Final = 0.1
"""Scaled time / production time by default: lease 2 s, heartbeat 0.5 s, reconcile 0.5 s (ours)
or 6 s (reference)."""
MIN_SCALE: Final = 0.1
"""Below this, floors that do not scale (SQS waits in whole seconds, a 0.5 s DynamoDB timeout,
the 1 s fleet recount) are as long as the timers they sit beside."""
SESSIONS: Final = "sessions"
PER_STREAM: Final = "per-stream"
REFERENCE: Final = "reference"
PRESETS: Final = (SESSIONS, PER_STREAM, REFERENCE)
"""Every preset, in the order tables list them (failover and stop run all three)."""
RENEWAL_PRESETS: Final = (SESSIONS, PER_STREAM)
"""The presets whose renewals differ (write cost, CPU, scale): the reference renews as
per-stream does."""
PRESET_LABELS: Final = {
    SESSIONS: "sessions",
    PER_STREAM: "per-stream",
    REFERENCE: "reference (seed design)",
}


def preset_settings(preset: str, ours: Settings) -> Settings:
    """``ours`` (our defaults, already scaled) as ``preset`` runs them; the liveness mode is
    always set explicitly, so a change of default cannot relabel a column. Raises ``KeyError``
    for an unknown preset."""
    if preset not in PRESET_LABELS:
        raise KeyError(preset)
    if preset == SESSIONS:
        return dataclasses.replace(ours, liveness=Liveness.SESSION)
    per_stream = dataclasses.replace(ours, liveness=Liveness.STREAM)
    return reference_settings(per_stream) if preset == REFERENCE else per_stream


@dataclass
class BenchContext:
    """What a section gets: mode, progress line, a scratch directory and the moto server."""

    quick: bool
    progress: Progress
    work_dir: Path
    scale: float = DEFAULT_SCALE
    """Scaled time / production time (0.1: ten times faster than production)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """Figures one section leaves for a later one (CPU per message for the scale section)."""
    _moto: MotoProcess | None = None
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def lease_seconds(self) -> float:
        """The scaled lease (production's × :attr:`scale`)."""
        return PRODUCTION_LEASE_SECONDS * self.scale

    @property
    def moto(self) -> MotoProcess:
        """The run's serialised moto server (started on first use)."""
        if self._moto is None:
            use_dummy_aws_credentials()
            self._moto = self._stack.enter_context(MotoProcess.start())
        return self._moto

    def resources(self, name: str, **overrides: Any) -> Settings:
        """Fresh resources on the moto server, production defaults plus ``overrides``."""
        base = Settings(aws_endpoint_url=self.moto.endpoint_url, aws_region="us-east-1")
        named = create_resources(base, prefix=f"bench-{name}-{uuid.uuid4().hex[:8]}")
        return dataclasses.replace(named, **overrides)

    def settings(self, preset: str, *, scale: float | None = None, **overrides: Any) -> Settings:
        """Fresh resources on the moto server with the preset's settings at timer ``scale``
        (default: the run's). Raises ``KeyError`` for an unknown preset."""
        named = self.resources(preset)
        lease = PRODUCTION_LEASE_SECONDS * (self.scale if scale is None else scale)
        ours = scaled_settings(named, lease_seconds=lease, metrics_flush_seconds=600.0)
        return dataclasses.replace(preset_settings(preset, ours), **overrides)

    def testbed(self, name: str, settings: Settings, *, rate: float) -> Testbed:
        """A testbed in a fresh directory under the scratch directory."""
        return Testbed(settings, self.work_dir / f"{name}-{uuid.uuid4().hex[:6]}", rate=rate)

    def close(self) -> None:
        """Stop the moto server."""
        self._stack.close()


@contextlib.contextmanager
def bench_context(
    quick: bool, progress: Progress, keep: bool = False, scale: float = DEFAULT_SCALE
) -> Any:
    """A :class:`BenchContext` at timer ``scale`` with a scratch directory removed afterwards
    (unless ``keep``)."""
    tmp = tempfile.mkdtemp(prefix="streamlease-bench-")
    ctx = BenchContext(quick=quick, progress=progress, work_dir=Path(tmp), scale=scale)
    try:
        yield ctx
    finally:
        ctx.close()
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
