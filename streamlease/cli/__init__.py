"""The ``streamlease`` command line (console script ``streamlease = streamlease.cli:main``)."""

from streamlease.cli.client import ApiClient, ApiError
from streamlease.cli.main import main

__all__ = ["ApiClient", "ApiError", "main"]
