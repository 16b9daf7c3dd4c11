"""The stage every measuring section shares: one moto server, fresh resources per preset, scale.

All timers are scaled by one factor, the run's ``--scale`` (default 0.1: lease 2 s = production's
20 s / 10), the same for our defaults and the reference preset; figures are reported in seconds
*and* in leases so they translate back to production.
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
from streamlease.settings import Settings

DEFAULT_SCALE: Final = 0.1
"""Scaled time / production time by default: lease 2 s, heartbeat 0.5 s, reconcile 0.5 s (ours)
or 6 s (reference)."""
MIN_SCALE: Final = 0.1
"""Below this, floors that do not scale (SQS waits in whole seconds, a 0.5 s DynamoDB timeout,
the 1 s fleet recount) are as long as the timers they sit beside."""
OURS: Final = "ours"
REFERENCE: Final = "reference"
PRESETS: Final = (OURS, REFERENCE)
PRESET_LABELS: Final = {
    OURS: "streamlease defaults",
    REFERENCE: "reference (seed design)",
}


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

    def settings(self, preset: str, **overrides: Any) -> Settings:
        """Fresh resources on the moto server with the preset's scaled settings."""
        named = self.resources(preset)
        ours = scaled_settings(named, lease_seconds=self.lease_seconds, metrics_flush_seconds=600.0)
        chosen = reference_settings(ours) if preset == REFERENCE else ours
        return dataclasses.replace(chosen, **overrides)

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
