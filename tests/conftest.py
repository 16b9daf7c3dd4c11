"""Fixtures shared by every test suite.

- ``aws_environment`` (session, automatic): dummy AWS credentials (``testing``), region
  ``us-east-1``, no ``AWS_PROFILE``, no shared config or credential files, no ``AWS_ENDPOINT_URL*``,
  no HTTP(S) proxy, and no ``STREAMLEASE_*`` setting from the developer's shell (the run's own
  switches, :data:`RUN_SWITCHES`, are kept). Set in
  ``os.environ``, so every subprocess a test starts inherits it too.
- ``moto_server`` (session): one serialised moto server subprocess
  (:class:`local.moto_process.MotoProcess`: ``.endpoint_url``, ``.port``, ``.pid``), started on the
  first test that asks for it. DynamoDB conditional writes and SQS receives on it are atomic.
- ``aws_settings`` (function): a :class:`~streamlease.settings.Settings` whose ``table_name``,
  ``queue_url`` and ``kinesis_stream_name`` name fresh resources (unique per test) on that server
  and whose ``aws_endpoint_url`` points at it; every other field is the default. Shrink timers
  with ``dataclasses.replace(aws_settings, lease_seconds=..., ...)``. The DynamoDB fault switch
  is reset to "up" before each test.
- ``dynamodb`` (function): a boto3 DynamoDB client for ``aws_settings`` (seeding, inspection).
- ``store`` (function): a :class:`~streamlease.lease_store.LeaseStore` on that table with the
  settings' clock-skew allowance.
- ``sessions`` (function): a :class:`~streamlease.session_store.SessionStore` on that table
  (worker items).
- ``measured`` (function): ``measured(what, value, unit)`` records a figure a liveness test
  measured (how long a takeover took, in leases); the figures are listed after the run. Tests
  assert that the thing happens within a generous cap; how soon is a benchmark figure
  (``make bench``), never a test's bound.

Suite-specific fixtures live in the conftest of their own directory.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from local.moto_process import MotoProcess, set_dynamodb_fault
from local.resources import create_resources
from local.worker_process import DUMMY_AWS_ENV
from streamlease import aws
from streamlease.lease_store import LeaseStore
from streamlease.session_store import SessionStore
from streamlease.settings import ENV_PREFIX, Settings

# Never a developer's credentials or ~/.aws (a missing file is an empty one to botocore).
_DUMMY_AWS = {**DUMMY_AWS_ENV, "AWS_SECURITY_TOKEN": "testing"}
_CLEARED_PREFIXES = ("AWS_ENDPOINT_URL", ENV_PREFIX)
_CLEARED = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
RUN_SWITCHES: Final = ("STREAMLEASE_TEST_", "STREAMLEASE_UPDATE_DOCS_SCREENSHOT")
"""Variables that tell the test run itself what to do (the browser is required, write the
documentation's picture, where to tally): kept, while every setting of streamlease is cleared."""


@pytest.fixture(scope="session", autouse=True)
def aws_environment() -> Iterator[None]:
    """Hermetic AWS environment for the whole session (see the module docstring)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(RUN_SWITCHES):
                continue
            if name in _CLEARED or name.startswith(_CLEARED_PREFIXES):
                patch.delenv(name)
        for name, value in _DUMMY_AWS.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="session")
def moto_server(aws_environment: None) -> Iterator[MotoProcess]:
    """One serialised moto server subprocess for the session."""
    with MotoProcess.start() as server:
        yield server


@pytest.fixture
def aws_settings(moto_server: MotoProcess) -> Settings:
    """Settings naming fresh resources on the session's moto server."""
    if not moto_server.is_running():
        pytest.fail("the session's moto server has exited; later tests cannot run")
    set_dynamodb_fault(moto_server.endpoint_url, "up")
    base = Settings(aws_endpoint_url=moto_server.endpoint_url, aws_region="us-east-1")
    return create_resources(base, prefix=f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def _dynamodb_client(moto_server: MotoProcess) -> Any:
    # One client for the session: building one costs ~0.1 s and they are thread-safe.
    settings = Settings(aws_endpoint_url=moto_server.endpoint_url, aws_region="us-east-1")
    return aws.client("dynamodb", settings)


@pytest.fixture
def dynamodb(aws_settings: Settings, _dynamodb_client: Any) -> Any:
    """A boto3 DynamoDB client for ``aws_settings``."""
    return _dynamodb_client


@pytest.fixture
def store(aws_settings: Settings, dynamodb: Any) -> LeaseStore:
    """A LeaseStore on the fresh table of ``aws_settings``."""
    return LeaseStore(dynamodb, aws_settings.table_name, clock_skew_ms=aws_settings.clock_skew_ms)


@pytest.fixture
def sessions(aws_settings: Settings, dynamodb: Any) -> SessionStore:
    """Worker items (sessions) on the test's table."""
    return SessionStore(dynamodb, aws_settings.table_name)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Parallel runs (``make test``'s first phase) hand out whole test files, so a module-scoped
    fixture (a local stack, an upstream simulator, a bench run) is made once, not once per
    worker; and all of ``tests/infra`` to one worker, which synthesizes the app once (~15 s of a
    core and ~1 GiB each time). Not ``--dist loadgroup``: pytest-xdist 3.8 puts the group into
    ``item._nodeid``, which pytest 9.2 no longer reads, so its groups silently do nothing."""
    from xdist.scheduler import LoadFileScheduling

    class ByFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/infra" if path.startswith("tests/infra/") else path

    return ByFile(config, log)


MEASURED_PREFIX = "measured: "


@pytest.fixture
def measured(record_property: Callable[[str, object], None]) -> Callable[[str, float, str], None]:
    """Record a figure this test measured (shown in the run's summary, and in JUnit XML)."""

    def record(what: str, value: float, unit: str) -> None:
        record_property(MEASURED_PREFIX + what, f"{value:.2f} {unit}")

    return record


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """List what the liveness tests measured (from every xdist worker's reports too), and write
    the outcome counts where ``make test``'s runner (``tests/tiers.py``) adds them up."""
    tally = os.environ.get("STREAMLEASE_TEST_TALLY")
    if tally and not hasattr(config, "workerinput"):
        counts = {  # as pytest's own summary line counts them
            outcome: sum(
                getattr(report, "count_towards_summary", True)
                for report in terminalreporter.stats.get(outcome, [])
            )
            for outcome in ("passed", "failed", "skipped", "error", "xfailed", "xpassed")
        }
        Path(tally).write_text(json.dumps(counts))
    lines = [
        f"{report.nodeid}: {name.removeprefix(MEASURED_PREFIX)} {value}"
        for outcome in ("passed", "failed")
        for report in terminalreporter.stats.get(outcome, [])
        if report.when == "call"
        for name, value in report.user_properties
        if name.startswith(MEASURED_PREFIX)
    ]
    if lines:
        terminalreporter.section("measured (the bounds on these are make bench's figures)")
        for line in sorted(lines):
            terminalreporter.line(line)
