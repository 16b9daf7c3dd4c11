"""Fixtures for the control-plane handler tests (API, reaper, auditor) on the moto server.

- ``control_plane``: the Lambda runtime configured for the test's fresh resources.
- ``api``: calls ``lambdas.api.handler`` with the stored API Gateway REST event, changed per call.
- ``commands``: reads (and deletes) what reached the command queue.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from control_plane_support import Api, CommandQueue

from lambdas import runtime
from streamlease.settings import Settings


@pytest.fixture
def control_plane(aws_settings: Settings) -> Iterator[runtime.Runtime]:
    """The Lambda runtime on this test's table and queue (strict URL policy)."""
    yield runtime.configure(aws_settings)
    runtime.configure(Settings())


@pytest.fixture
def api(control_plane: runtime.Runtime) -> Api:
    """The API handler bound to this test's resources."""
    return Api()


@pytest.fixture
def commands(aws_settings: Settings) -> CommandQueue:
    """The test's command queue."""
    return CommandQueue(aws_settings)
