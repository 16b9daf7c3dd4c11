"""Named fleet sizes: ``-c streamlease:preset=NAME`` picks one; ``cdk.json`` names the deployed
default (:data:`DEFAULT_PRESET`), so ``make deploy`` with no keys deploys what the bill prices.

A preset sets the fields that decide the bill (:data:`PRESET_FIELDS`); any of them given as a
context key of its own overrides the preset's value. Each is sized for feeds of up to one
message rate, by the rule ``make bench``'s cost section applies to what it measures
(``bench/cost_model.py``; the stored run is ``bench/results/cost.md``):

- capacity per worker: the most streams whose measured CPU keeps within half the task's vCPU, and
  whose memory within half its memory, at that rate, rounded down to a multiple of 50;
- headroom: at ``expected_streams`` the fleet settles (target tracking, or ``min_tasks``) at a
  task count that leaves at least one task's capacity spare, so the ``Headroom`` alarm is quiet at
  rest (:func:`cdk.config.settled_tasks`); ``max_tasks`` holds 1.5 × the streams with one task
  lost (:func:`cdk.config.min_max_tasks`);
- the provisioned sink's shards: the measured bytes per message at 200 B payloads at ≤ 70 % of a
  shard's 1 MB/s.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final


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
    # 1 msg/s: 1,000 streams on one 0.25 vCPU task by the sizing rule; two tasks at rest
    # leave one task spare (Headroom quiet); one shard takes 1,000 × ~250 B/s.
    Preset.LIGHT: {
        **_COMMON,
        "capacity_per_worker": 1000,
        "min_tasks": 2,
        "max_tasks": 3,
        "sink_shards": 1,
    },
    # 10 msg/s: 250 streams a task; scaling settles at 6 tasks (175 at target) for 1,000
    # streams; 10,000 messages/s of ~250 B need 4 shards at 70 %.
    Preset.BUSY: {
        **_COMMON,
        "capacity_per_worker": 250,
        "min_tasks": 2,
        "max_tasks": 7,
        "sink_shards": 4,
    },
}
"""Field name → value of each preset; every preset sets every field of :data:`PRESET_FIELDS`."""
