"""Who this worker process is: a worker id unique per incarnation, plus what the fleet shows.

The id is ``<task id>/<pid>-<4 hex>`` on ECS (the task id is the last segment of the task ARN),
else ``<hostname>/<pid>-<4 hex>``; ``Settings.worker_id`` overrides it. The reaper relies on
"a worker id starts with its task id and a slash" to release the streams of a stopped task.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import urllib.request
from dataclasses import dataclass
from importlib import metadata

from streamlease.settings import Settings

METADATA_TIMEOUT_SECONDS = 2.0
"""How long start-up waits for the ECS task metadata endpoint before falling back."""


@dataclass(frozen=True)
class Identity:
    """What a worker says about itself in its worker item and logs."""

    worker_id: str
    task_arn: str
    host: str
    pid: int
    version: str


def task_id_of(task_arn: str) -> str:
    """The task id: the last ``/`` segment of an ECS task ARN (``""`` for an empty ARN)."""
    return task_arn.rstrip("/").rsplit("/", 1)[-1] if task_arn else ""


def worker_id_for(base: str, pid: int, suffix: str) -> str:
    """``<base>/<pid>-<suffix>``; ``base`` is the task id or the host name."""
    return f"{base}/{pid}-{suffix}"


def package_version() -> str:
    """The installed streamlease version, or ``unknown`` (a container copies the source)."""
    try:
        return metadata.version("streamlease")
    except metadata.PackageNotFoundError:
        return "unknown"


def fetch_task_arn(metadata_uri: str, timeout_seconds: float) -> str:
    """Read ``TaskARN`` from the ECS task metadata endpoint v4 (blocking; call in a thread).

    Raises ``OSError`` or ``ValueError`` when the endpoint does not answer usefully.
    """
    url = metadata_uri.rstrip("/") + "/task"
    if not url.startswith(("http://", "https://")):
        raise ValueError("metadata endpoint is not http(s)")
    with urllib.request.urlopen(url, timeout=timeout_seconds) as response:  # noqa: S310 - checked above
        document = json.loads(response.read(1 << 20))
    arn = document.get("TaskARN") if isinstance(document, dict) else None
    if not isinstance(arn, str) or not arn:
        raise ValueError("task metadata has no TaskARN")
    return arn


async def resolve_identity(settings: Settings) -> Identity:
    """Build this process's identity; waits at most :data:`METADATA_TIMEOUT_SECONDS` for ECS."""
    pid = os.getpid()
    host = socket.gethostname()
    task_arn = settings.task_arn
    if not task_arn and settings.ecs_container_metadata_uri_v4:
        try:
            async with asyncio.timeout(METADATA_TIMEOUT_SECONDS):
                task_arn = await asyncio.to_thread(
                    fetch_task_arn,
                    settings.ecs_container_metadata_uri_v4,
                    METADATA_TIMEOUT_SECONDS,
                )
        except (OSError, ValueError, TimeoutError):
            task_arn = ""  # the host name is unique enough; the reaper then cannot match it
    worker_id = settings.worker_id or worker_id_for(
        task_id_of(task_arn) or host, pid, secrets.token_hex(2)
    )
    return Identity(
        worker_id=worker_id, task_arn=task_arn, host=host, pid=pid, version=package_version()
    )
