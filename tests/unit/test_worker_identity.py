"""Worker ids: unique per incarnation, prefixed with the ECS task id the reaper matches."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from streamlease.schema import task_id_of, worker_id_for
from streamlease.settings import Settings
from worker.identity import resolve_identity

ARN = "arn:aws:ecs:eu-west-1:123456789012:task/prod-cluster/0a1b2c3d4e5f"


@pytest.fixture
def metadata_endpoint() -> Iterator[str]:
    """A fake ECS task metadata endpoint v4 answering ``/task``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"TaskARN": ARN, "Family": "worker"}).encode()
            self.send_response(200 if self.path == "/v4/abc/task" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v4/abc"
    server.shutdown()
    server.server_close()


def test_the_task_id_is_the_last_segment_of_the_arn() -> None:
    assert task_id_of(ARN) == "0a1b2c3d4e5f"
    assert task_id_of("") == ""


def test_worker_id_format() -> None:
    assert worker_id_for("0a1b2c3d4e5f", 7, "beef") == "0a1b2c3d4e5f/7-beef"


async def test_on_ecs_the_worker_id_starts_with_the_task_id(metadata_endpoint: str) -> None:
    """The task ARN comes from the metadata endpoint; the id is ``<task id>/<pid>-<4 hex>``."""
    identity = await resolve_identity(Settings(ecs_container_metadata_uri_v4=metadata_endpoint))
    assert identity.task_arn == ARN
    assert re.fullmatch(rf"0a1b2c3d4e5f/{os.getpid()}-[0-9a-f]{{4}}", identity.worker_id)


async def test_a_configured_task_arn_needs_no_endpoint() -> None:
    identity = await resolve_identity(Settings(task_arn=ARN))
    assert identity.worker_id.startswith("0a1b2c3d4e5f/")


async def test_without_ecs_the_host_name_is_used_and_each_incarnation_differs() -> None:
    first = await resolve_identity(Settings())
    second = await resolve_identity(Settings())
    assert first.worker_id.startswith(socket.gethostname() + f"/{os.getpid()}-")
    assert first.worker_id != second.worker_id
    assert first.task_arn == ""


async def test_an_unreachable_metadata_endpoint_does_not_hold_up_start_up() -> None:
    """A dead endpoint falls back to the host name within the metadata timeout."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    started = time.monotonic()
    identity = await resolve_identity(
        Settings(ecs_container_metadata_uri_v4=f"http://127.0.0.1:{port}/v4")
    )
    assert time.monotonic() - started < 3.0
    assert identity.worker_id.startswith(socket.gethostname() + "/")


async def test_the_worker_id_setting_overrides_everything() -> None:
    identity = await resolve_identity(Settings(worker_id="fixed/1-0000", task_arn=ARN))
    assert identity.worker_id == "fixed/1-0000"
    assert identity.task_arn == ARN
