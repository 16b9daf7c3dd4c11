"""The local dashboard in a real browser: ``make run``'s page shows the streams a user started,
from the metrics the workers and the auditor publish, and follows a worker killed with kill -9.

A headless Chromium (Debian's package) loads ``/dashboard`` of a stack started as ``make run``
starts it (timers scaled, metrics flushed every second) and the test reads what the page drew:
each graph's legend carries its series' latest, lowest and highest values, and the per-stream
panel lists the streams. Screenshots of both moments are left in ``build/test-screenshots/``
(:data:`SCREENSHOTS`), replaced by every run; with ``STREAMLEASE_UPDATE_DOCS_SCREENSHOT=1`` the
one after the kill also replaces the documentation's (``docs/local-dashboard.png``), marked with
the page's fingerprint: a test run leaves the checkout's tracked files as they were, and
``tests/docs/test_dashboard_picture.py`` fails when the page changed but its picture did not.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from headless_chromium import Chromium, require_chromium
from local_stack_run import WAIT, StackRun, held, running_stack, streams_by_id, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
from dashboard_picture import DOCS_PICTURE, KEYWORD, fingerprint, with_text

from cdk.components.dashboard_widgets import EMF_SOURCES, ROWS
from streamlease.telemetry import AuditorMetric, ReaperMetric, WorkerMetric

pytestmark = pytest.mark.slow

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "test-screenshots"
"""Where the screenshots go: in the checkout (ignored by git), where CI can keep them."""
UPDATE_DOCS_ENV = "STREAMLEASE_UPDATE_DOCS_SCREENSHOT"
STREAMS = [f"dash-{n}" for n in range(1, 6)]
LEGENDS = """
Object.fromEntries(Array.from(document.querySelectorAll("section.widget")).map(section => [
  section.dataset.title,
  Object.fromEntries(Array.from(section.querySelectorAll("li")).map(
    item => [item.dataset.label, item.dataset.latest === "" ? null : Number(item.dataset.latest)]))
]))
"""
HIGHEST = """
Object.fromEntries(Array.from(document.querySelectorAll("section.widget")).map(section => [
  section.dataset.title,
  Object.fromEntries(Array.from(section.querySelectorAll("li")).map(
    item => [item.dataset.label, item.dataset.max === "" ? null : Number(item.dataset.max)]))
]))
"""
PANEL_STREAMS = """
Array.from(document.querySelectorAll("#streams tbody tr td:first-child")).map(td => td.textContent)
"""


def title_of(metric: str) -> str:
    """The title of the graph that draws ``metric`` (from the one widget list)."""
    return next(
        graph.title
        for row in ROWS
        for graph in row
        for series in (*graph.left, *graph.right)
        if series.metric == metric and series.source in EMF_SOURCES
    )


def latest(page: dict[str, dict[str, float | None]], metric: str, label: str = "") -> Any:
    """The latest value the page shows for ``metric`` (legend ``label``, default its name)."""
    return page.get(title_of(metric), {}).get(label or metric)


def test_the_dashboard_shows_the_streams_and_follows_a_killed_worker(tmp_path: Path) -> None:
    """The page loads with every local graph, shows the five streams wanted, owned and
    flowing, and after kill -9 of a worker shows the unplanned stop, the takeovers of its
    streams and the streams owned again — all drawn from the workers', the auditor's and the
    reaper's own metrics — and lists the streams in its per-stream panel."""
    binary = require_chromium()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOTS.glob("*.png"):
        old.unlink()
    with (
        running_stack(tmp_path / "stack", local_metrics_flush_seconds=1.0) as stack,
        Chromium(binary, tmp_path / "profile") as browser,
    ):
        upstream = f"ws://127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}"
        for stream_id in STREAMS:
            started = stack.cli("start", stream_id, f"{upstream}/{stream_id}?rate=5")
            assert started.returncode == 0, started.stderr
        browser.open(f"{stack.env['STREAMLEASE_API_URL']}/dashboard")

        def page_shows(check: Callable[[dict[str, Any]], bool]) -> Callable[[], bool]:
            return lambda: check(browser.evaluate(LEGENDS))

        def flowing(page: dict[str, Any]) -> bool:
            return (
                latest(page, AuditorMetric.STARTED_STREAMS) == len(STREAMS)
                and latest(page, AuditorMetric.OWNED_STREAMS) == len(STREAMS)
                and (latest(page, WorkerMetric.MESSAGES_RECEIVED, "messages/s") or 0) > 0
            )

        wait_until(page_shows(flowing), WAIT, "the page to show 5 streams owned", stack)
        before = browser.evaluate(LEGENDS)
        assert latest(before, AuditorMetric.LIVE_WORKERS) == 3
        assert latest(before, ReaperMetric.UNPLANNED_TASK_STOPS, "unplanned stops") is None
        browser.screenshot(SCREENSHOTS / "dashboard-streams.png")

        victim = kill_a_busy_worker(stack)

        def recovered(page: dict[str, Any]) -> bool:
            return (
                latest(page, ReaperMetric.UNPLANNED_TASK_STOPS, "unplanned stops") == 1
                and latest(page, AuditorMetric.OWNED_STREAMS) == len(STREAMS)
                and latest(page, AuditorMetric.LIVE_WORKERS) == 3
            )

        wait_until(page_shows(recovered), WAIT, "the page to show the kill and recovery", stack)
        assert all(streams_by_id(stack)[i]["owner"] != victim for i in STREAMS)

        def taken_over() -> bool:
            highest = browser.evaluate(HIGHEST)
            return (latest(highest, WorkerMetric.TAKEOVERS, "takeovers") or 0) >= 1

        wait_until(taken_over, WAIT, "the takeovers series to count the kill's streams", stack)

        def panel_lists_the_streams() -> bool:
            return set(browser.evaluate(PANEL_STREAMS)) >= set(STREAMS)

        wait_until(panel_lists_the_streams, WAIT, "the per-stream panel to list them", stack)
        shot = browser.screenshot(SCREENSHOTS / "dashboard-after-kill-9.png")
        if os.environ.get(UPDATE_DOCS_ENV) == "1":
            DOCS_PICTURE.write_bytes(with_text(shot.read_bytes(), KEYWORD, fingerprint()))
        print(f"dashboard screenshots: {shot.parent}")
        assert shot.stat().st_size > 10_000
        assert "Only on the CloudWatch dashboard" in browser.evaluate(
            "document.getElementById('footer').textContent"
        )


def kill_a_busy_worker(stack: StackRun) -> str:
    """kill -9 the worker that holds the first stream; returns its session id."""
    streams = streams_by_id(stack)
    assert all(held(streams[i]) for i in STREAMS)
    owner = streams[STREAMS[0]]["owner"]
    victim = next(w for w in stack.cli_json("workers")["workers"] if w["id"] == owner)
    os.kill(victim["pid"], signal.SIGKILL)
    return str(owner)
