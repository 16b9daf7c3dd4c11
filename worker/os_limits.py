"""Operating-system limits the worker raises at start-up: enough file descriptors for a socket
per stream. Standard library only, so the upstream simulator (as many sockets) uses it too."""

from __future__ import annotations

import contextlib
import resource
from typing import Final

MAX_OPEN_FILES: Final = 1 << 20
"""The soft limit asked for when the hard limit is unlimited."""


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (one socket per stream, plus files), or
    to :data:`MAX_OPEN_FILES` when the hard limit is unlimited; the hard limit is left alone.

    Returns the soft limit now in force; never fails (a refusal keeps the old limit).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft
