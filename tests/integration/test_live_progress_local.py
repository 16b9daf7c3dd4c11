"""Live progress through the local stack: a stream's delivered seq and rate, read from what its
holder's renewals carry (no write of their own), agree with its sink in every view an operator
has — ``ls``, ``get``, ``watch --once`` and the local dashboard's data — and say how old they
are.

A stream at 20 msg/s on a stack with a 2 s lease (heartbeat 0.5 s); once 15 s have passed since
its first record, every view must show a rate of at least 15 msg/s and a delivered seq within
one heartbeat's messages of the sink's last record (read just before the view). Each view is
polled until it does, with a generous cap: a busy machine delays renewals, which is no failure.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from local_stack_run import WAIT, StackRun, running_stack, wait_until

from streamlease.schema import Liveness
from worker.sinks.file import read_records, sink_file_name

pytestmark = pytest.mark.slow

RATE = 20
STREAM = "live-1"
SETTLED_SECONDS = 15.0


@pytest.fixture(scope="module", params=[Liveness.SESSION, Liveness.STREAM])
def stack(tmp_path_factory: pytest.TempPathFactory, request: Any) -> Iterator[StackRun]:
    """A stack in each liveness mode: the seq rides on a session's vector, or on each
    stream's own lease item."""
    with running_stack(tmp_path_factory.mktemp("live") / "stack", liveness=request.param) as run:
        yield run


def sink_last_seq(stack: StackRun) -> int:
    """The seq of the last record the sink holds for :data:`STREAM`."""
    path = stack.state_dir / "sink" / sink_file_name(STREAM)
    last = None
    for record in read_records(path):
        last = record
    assert last is not None
    return int(last["seq"])


def first_record_at(stack: StackRun) -> float:
    """Wall time (s) the sink's first record of :data:`STREAM` appeared, as seen by polling."""
    path = stack.state_dir / "sink" / sink_file_name(STREAM)
    wait_until(lambda: path.exists() and path.stat().st_size > 0, WAIT, "a first record", stack)
    return time.time()


def dashboard_view(stack: StackRun) -> dict[str, Any] | None:
    url = f"{stack.env['STREAMLEASE_API_URL']}/dashboard/data"
    with urllib.request.urlopen(url, timeout=30) as response:
        data = json.loads(response.read())
    panel = data.get("streams") or {}
    return next((row for row in panel.get("busiest") or [] if row["id"] == STREAM), None)


def cli_view(stack: StackRun, *args: str) -> Callable[[], dict[str, Any] | None]:
    def read() -> dict[str, Any] | None:
        found = stack.cli_json(*args)
        streams = found.get("streams", [found])
        return next((s for s in streams if s.get("id") == STREAM), None)

    return read


def test_every_view_shows_the_live_rate_and_delivered_seq(stack: StackRun) -> None:
    """``ls``, ``get``, ``watch --once`` and the dashboard: rate ≥ 15 msg/s, the delivered seq
    within one heartbeat of the sink, each with the age of its reading."""
    upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
    started = stack.cli("start", STREAM, f"{upstream}/{STREAM}?rate={RATE}")
    assert started.returncode == 0, started.stderr
    first = first_record_at(stack)
    heartbeat = float(stack.env["STREAMLEASE_HEARTBEAT_SECONDS"])
    tolerance = math.ceil(RATE * heartbeat)
    time.sleep(max(0.0, first + SETTLED_SECONDS - time.time()))  # the claim is about then
    views = {
        "ls": cli_view(stack, "ls"),
        "get": cli_view(stack, "get", STREAM),
        "watch --once": cli_view(stack, "watch", "--once"),
        "dashboard": lambda: dashboard_view(stack),
    }
    seen: dict[str, tuple[int, float, int]] = {}
    for name, view in views.items():

        def agrees(name: str = name, view: Callable[[], Any] = view) -> bool:
            behind = sink_last_seq(stack)
            row = view()
            if not row or row.get("msgs_per_s") is None or row.get("last_seq") is None:
                return False
            seen[name] = (row["last_seq"], row["msgs_per_s"], behind)
            return row["msgs_per_s"] >= 15 and row["last_seq"] >= behind - tolerance

        wait_until(agrees, WAIT, f"{name} to show the live rate and seq (last: {seen})", stack)
        assert seen[name][0] <= sink_last_seq(stack), "a seq the sink does not hold"

    def dated() -> bool:
        """``get`` says how old each figure is. Not on every call: within a second after a
        progress report, the report and the last renewal are too close for a rate (by design,
        streamlease.live_progress), and ``get`` shows none until a renewal a second later."""
        detail = stack.cli("get", STREAM).stdout
        return "msg/s from" in detail and "(read " in detail

    wait_until(dated, WAIT, "get to show the rate and the seq with their ages", stack)
    listing = stack.cli("ls").stdout.splitlines()
    assert "MSG/S" in listing[0] and "SEQ_AGE" in listing[0]
    assert stack.cli("stop", STREAM).returncode == 0
