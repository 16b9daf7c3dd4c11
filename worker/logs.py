"""The worker's one logger: Powertools JSON lines on stdout, constant messages, data in keys.

Keys used across the worker: ``stream_id``, ``epoch``, ``worker_id`` (appended to every line once
the identity is known), ``reason``, ``error``. Never a URL's query string, a credential or an
upstream payload: messages are constants and errors are reduced to their type and a short,
sanitized text by :func:`describe`.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger

from streamlease.telemetry import WORKER_SERVICE

logger = Logger(service=WORKER_SERVICE)


def configure(level: str, worker_id: str) -> None:
    """Set the level and stamp every following line with ``worker_id``."""
    logger.setLevel(level.upper())
    logger.append_keys(worker_id=worker_id)


def describe(exc: BaseException) -> str:
    """A short description of ``exc`` safe to log: its type, never its arguments.

    Exception texts can carry URLs with query strings (botocore, websockets), so only the
    type name and, for the project's own errors, their message (which it writes itself) appear.
    """
    from streamlease.errors import StreamleaseError

    if isinstance(exc, StreamleaseError):
        return f"{type(exc).__name__}: {exc}"[:300]
    return type(exc).__name__
