"""Fixtures of the worker integration tests (``worker_helpers``), shared by every module here,
and ``each_upstream_library``: a module that uses it runs every test on each upstream library
(``pytestmark = pytest.mark.usefixtures("each_upstream_library")``)."""

from collections.abc import Iterator

import pytest
import upstream_client
from worker_helpers import fleet, settings, streams, upstream

from streamlease.settings import UpstreamLibrary

__all__ = ["each_upstream_library", "fleet", "settings", "streams", "upstream"]


@pytest.fixture(params=list(UpstreamLibrary))
def each_upstream_library(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[UpstreamLibrary]:
    """Every :class:`~upstream_client.LinkRun` of the test on this library."""
    monkeypatch.setattr(upstream_client, "LIBRARY", request.param)
    yield request.param
