"""Fixtures of the worker integration tests (``worker_helpers``), shared by every module here."""

from worker_helpers import fleet, settings, streams, upstream

__all__ = ["fleet", "settings", "streams", "upstream"]
