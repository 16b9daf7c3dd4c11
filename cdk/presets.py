"""Named fleet sizes: ``-c streamlease:preset=NAME`` picks one; ``cdk.json`` names the deployed
default (:data:`DEFAULT_PRESET`), so ``make deploy`` with no keys deploys what the bill prices.

A preset sets the fields that decide the bill (:data:`PRESET_FIELDS`); any of them given as a
context key of its own overrides the preset's value. Each is sized for feeds of up to one
message rate, by the rule ``make bench``'s cost section applies to what it measures
(``bench/cost_model.py``; the stored run is ``bench/results/cost.md``, its sizing by rate
``bench/results/capacity.json``, which :func:`sized_for` turns into a preset's fields: a test
holds every preset to it):

- capacity per worker: the most streams whose measured CPU keeps within half the task's vCPU, and
  whose memory within half its memory, at that rate, rounded down to a multiple of 50;
- headroom: at ``expected_streams`` the fleet settles (target tracking, or ``min_tasks``) at a
  task count that leaves at least one task's capacity spare, so the ``Headroom`` alarm is quiet at
  rest (:func:`cdk.config.settled_tasks`), and at least two (one a zone); ``max_tasks`` holds
  1.5 × the streams with one task lost (:func:`cdk.config.min_max_tasks`), and is above the
  settled count (at ``max_tasks`` the alarm fires);
- the provisioned sink's shards: the measured bytes per message at 200 B payloads at ≤ 70 % of a
  shard's 1 MB/s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from cdk.config import min_max_tasks, settled_tasks, spare_at_rest_tasks


class Preset(StrEnum):
    """The fleet sizes on offer, named by the feeds they are sized for."""

    LIGHT = "light"
    """Feeds of up to 1 message/s a stream (the deployed default)."""
    BUSY = "busy"
    """Feeds of up to 10 messages/s a stream."""


DEFAULT_PRESET: Final = Preset.LIGHT
"""The preset ``cdk.json`` deploys; :class:`cdk.config.DeploymentConfig`'s defaults equal it."""

PRESET_FIELDS: Final = (
    "capacity_per_worker",
    "expected_streams",
    "min_tasks",
    "max_tasks",
    "target_load_fraction",
    "worker_cpu",
    "worker_memory_mib",
    "worker_architecture",
    "container_insights",
    "sink_capacity",
    "sink_shards",
)
"""The :class:`~cdk.config.DeploymentConfig` fields a preset sets (and ``cdk.json`` leaves out,
so that the preset decides them)."""

_COMMON: Final[Mapping[str, Any]] = {
    "expected_streams": 1000,
    "target_load_fraction": 0.7,
    "worker_cpu": 256,
    "worker_memory_mib": 512,
    "worker_architecture": "arm64",
    "container_insights": False,
    "sink_capacity": "provisioned",
}

PRESETS: Final[Mapping[Preset, Mapping[str, Any]]] = {
    # 1 msg/s: 650 streams on one 0.25 vCPU task by the sizing rule; three tasks at rest
    # leave one task spare (two would hold 1,000 with 300 spare: Headroom would never clear);
    # one shard takes 1,000 × ~230 B/s.
    Preset.LIGHT: {
        **_COMMON,
        "capacity_per_worker": 650,
        "min_tasks": 3,
        "max_tasks": 4,
        "sink_shards": 1,
    },
    # 10 msg/s: 200 streams a task; scaling settles at 8 tasks (140 at target) for 1,000
    # streams; 10,000 messages/s of ~230 B need 4 shards at 70 %.
    Preset.BUSY: {
        **_COMMON,
        "capacity_per_worker": 200,
        "min_tasks": 6,
        "max_tasks": 9,
        "sink_shards": 4,
    },
}
"""Field name → value of each preset; every preset sets every field of :data:`PRESET_FIELDS`."""


MEASURED_SIZING: Final = Path(__file__).resolve().parents[1] / "bench/results/capacity.json"
"""The stored sizing of a 0.25 vCPU / 0.5 GB task by message rate (``make bench``'s cost
section writes it with ``cost.md``)."""
RATE_OF: Final[Mapping[Preset, str]] = {Preset.LIGHT: "1", Preset.BUSY: "10"}
"""The messages a second and stream each preset is sized for (a rate of the stored sizing)."""
MIN_TASKS: Final = 2
"""One task in each of two zones."""


def measured_sizing(path: Path = MEASURED_SIZING) -> dict[str, Any]:
    """The stored sizing (:data:`MEASURED_SIZING`): ``{"rates": {rate: {"capacity_per_worker":
    n, "sink_shards": n, ...}}, ...}``."""
    return dict(json.loads(path.read_text()))


def sized_for(preset: Preset, sizing: Mapping[str, Any]) -> dict[str, Any]:
    """The fields ``preset`` gets from ``sizing`` by the rules of the module docstring."""
    rate = sizing["rates"][RATE_OF[preset]]
    capacity = int(rate["capacity_per_worker"])
    streams = int(_COMMON["expected_streams"])
    min_tasks = max(MIN_TASKS, spare_at_rest_tasks(streams, capacity))
    settled = settled_tasks(streams, capacity, _COMMON["target_load_fraction"], min_tasks)
    return {
        **_COMMON,
        "capacity_per_worker": capacity,
        "min_tasks": min_tasks,
        "max_tasks": max(min_max_tasks(streams, capacity), settled + 1),
        "sink_shards": int(rate["sink_shards"]),
    }
