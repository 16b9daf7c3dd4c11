"""Who this worker process is: a worker id unique per session, plus what the fleet shows.

The id rules (and the reaper's "the id continues the task id" rule) are
:mod:`streamlease.schema`'s: ``<task id>/<pid>-<4 hex>`` on ECS, else ``<hostname>/<pid>-<4
hex>``; ``Settings.worker_id`` overrides it. A process whose session expired starts a new one
under a new id (:meth:`Identity.session_id`).
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

from streamlease.schema import task_id_of, worker_id_for
from streamlease.settings import Settings

METADATA_TIMEOUT_SECONDS = 2.0
"""How long start-up waits for the ECS task metadata endpoint before falling back."""


@dataclass(frozen=True)
class Identity:
    """What a worker says about itself in its worker item and logs."""

    worker_id: str
    """The first session's id."""
    task_arn: str
    host: str
    pid: int
    version: str
    configured: bool = False
    """True when ``worker_id`` was given in the settings (tests, the local stack)."""

    def session_id(self, incarnation: int) -> str:
        """The id of this process's ``incarnation``-th session (1: :attr:`worker_id`).

        A configured id gets ``.2``, ``.3``, ...; a derived one a new random suffix. Either way
        it still continues the task id, so the reaper finds every session of the task.
        """
        if incarnation <= 1:
            return self.worker_id
        if self.configured:
            return f"{self.worker_id}.{incarnation}"
        base = task_id_of(self.task_arn) or self.host
        return worker_id_for(base, self.pid, secrets.token_hex(2))


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
        worker_id=worker_id,
        task_arn=task_arn,
        host=host,
        pid=pid,
        version=package_version(),
        configured=bool(settings.worker_id),
    )
