"""``make demo``: 20 streams, one worker killed, another rolled, and what the sink received.

Uses the local stack ``make run`` runs, found the way the CLI finds its API
(``STREAMLEASE_API_URL``, whose ``/local/stack`` page says where that stack keeps its files,
then ``stack.json`` in the state directory), or starts one (and stops it again at the end),
starts 20
streams on the upstream simulator, then — while a live view like ``streamlease watch`` shows
them — kills the busiest worker with SIGKILL (the supervisor reaps it and starts a replacement)
and rolls another with SIGTERM (it drains and hands its streams off). Finally it stops the
streams, reads the sink files and lease event logs and prints, per stream, the messages, gaps
(must be 0), duplicates and the time the stream had no owner, and says where to look next:
the stack it used stays running; one it started itself is stopped, its files kept. Exit status
0 when no invariant was broken.
"""

from __future__ import annotations

import math
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

from local.invariants import load_kinesis
from local.sink_report import SinkReport, build_report, format_report
from local.stack_files import StackPaths, read_stack_file
from local.supervisor import REPO_ROOT
from streamlease.cli.client import LOCAL_STACK_PATH, ApiClient, ApiError
from streamlease.cli.render import worker_name
from streamlease.cli.target import target_for
from streamlease.cli.transport import TransportError
from streamlease.cli.watch import (
    CLEAR,
    RateTracker,
    Snapshot,
    observe_snapshot,
    render_frame,
    take_snapshot,
)
from streamlease.errors import ConfigError
from streamlease.settings import Settings, env_name

STREAMS: Final = 20
RATE_PER_SECOND: Final = 5
STACK_START_SECONDS: Final = 120.0
RECOVERY_SECONDS: Final = 60.0
"""Longest wait for every stream to have an owner again (a lease lapses in 20 s by default)."""


class DemoError(Exception):
    """The demo cannot go on; the message says why."""


class DemoView:
    """Redraws a watch-style frame of the demo's streams with the story so far beneath it.

    On a terminal the frame is redrawn every second; otherwise only the story lines print.
    """

    def __init__(self, client: ApiClient, out: TextIO, stream_ids: Sequence[str]) -> None:
        self._client = client
        self._out = out
        self._ids = set(stream_ids)
        self.live = out.isatty()
        self._rates = RateTracker()
        self.story: list[str] = []

    def note(self, text: str) -> None:
        """Add a line to the story (printed at once when not live)."""
        line = f"{time.strftime('%H:%M:%S')}  {text}"
        self.story.append(line)
        if not self.live:
            self._out.write(line + "\n")
            self._out.flush()

    def show(
        self, seconds: float, until: Callable[[Snapshot], bool] | None = None
    ) -> tuple[Snapshot, float]:
        """Poll (and draw) for up to ``seconds`` or until ``until(snapshot)``; returns the last
        snapshot and the seconds it took."""
        started = time.monotonic()
        while True:
            tick = time.monotonic()
            snapshot = self.snapshot()
            if self.live:
                self._draw(snapshot)
            elapsed = time.monotonic() - started
            if (until is not None and until(snapshot)) or elapsed >= seconds:
                return snapshot, elapsed
            time.sleep(max(1.0 - (time.monotonic() - tick), 0.05))

    def snapshot(self) -> Snapshot:
        """The demo's streams and every worker, now."""
        full = take_snapshot(self._client)
        streams = [s for s in full.streams if s.get("id") in self._ids]
        snapshot = Snapshot(streams, full.workers, full.error)
        observe_snapshot(self._rates, snapshot, time.monotonic())
        return snapshot

    def _draw(self, snapshot: Snapshot) -> None:
        size = os.get_terminal_size(self._out.fileno())
        frame = render_frame(
            snapshot,
            self._rates,
            api_url=self._client.base_url,
            width=size.columns,
            height=max(size.lines - len(self.story[-8:]) - 2, 10),
        )
        lines = [*frame, "", *self.story[-8:]]
        self._out.write(CLEAR + "\n".join(line[: size.columns] for line in lines) + "\n")
        self._out.flush()


def all_owned(ids: set[str], not_by: str | None = None) -> Callable[[Snapshot], bool]:
    """A condition: every stream in ``ids`` has a live lease held by someone but ``not_by``."""

    def check(snapshot: Snapshot) -> bool:
        held = {
            s["id"]
            for s in snapshot.streams
            if s.get("owner")
            and s.get("owner") != not_by
            and (s.get("lease_remaining_ms") or 0) > 0
            and s.get("lease_state", "held") == "held"
        }
        return not snapshot.error and ids <= held

    return check


def busiest_worker(
    snapshot: Snapshot, local_pids: set[int], exclude: set[int]
) -> tuple[dict[str, Any], int]:
    """The stack's worker holding the most demo streams (and how many) not in ``exclude``."""
    held: dict[str, int] = {}
    for stream in snapshot.streams:
        if stream.get("owner"):
            held[stream["owner"]] = held.get(stream["owner"], 0) + 1
    candidates = [
        w for w in snapshot.workers if w.get("pid") in local_pids and w.get("pid") not in exclude
    ]
    if not candidates:
        raise DemoError("no worker of the local stack is live")
    best = max(candidates, key=lambda w: held.get(str(w.get("id")), 0))
    return best, held.get(str(best.get("id")), 0)


class StackHandle:
    """The local stack the demo runs against; started here (and stopped at the end) if none
    runs. Found as the CLI finds its API: ``settings.api_url`` (``STREAMLEASE_API_URL``) if
    set, else the stack of ``settings.local_state_dir``."""

    def __init__(self, settings: Settings, out: TextIO) -> None:
        self.paths = StackPaths.for_settings(settings)
        self._api_url = settings.api_url
        self._out = out
        self._process: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}

    def ensure_running(self) -> None:
        """Use the running stack, or start ``python -m local`` and wait for it to be ready.

        Raises :class:`DemoError` saying what to set when ``STREAMLEASE_API_URL`` names no
        running local stack.
        """
        if self._api_url:
            self.info = self._describe_from_api()
            self._out.write(f"using the local stack at {self._api_url} (pid {self.info['pid']})\n")
            return
        info = read_stack_file(self.paths)
        if info is not None:
            self.info = info
            self._out.write(f"using the local stack already running (pid {info['pid']})\n")
            return
        log = self.paths.state_dir / "demo-stack.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self._out.write(f"starting the local stack (its output: {log}) …\n")
        self._out.flush()
        with open(log, "wb") as handle:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "local"],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + STACK_START_SECONDS
        while (info := read_stack_file(self.paths)) is None:
            if self._process.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                raise DemoError("the local stack did not start:\n  " + "\n  ".join(tail))
            if time.monotonic() > deadline:
                raise DemoError(f"the local stack was not ready after {STACK_START_SECONDS:g} s")
            time.sleep(0.5)
        self.info = info

    def _describe_from_api(self) -> dict[str, Any]:
        """The description the stack at ``STREAMLEASE_API_URL`` serves; :class:`DemoError`
        naming the variable when there is none."""
        variable = f"{env_name('api_url')}={self._api_url}"
        try:
            _, info = ApiClient(self._api_url, timeout_seconds=5.0).request("GET", LOCAL_STACK_PATH)
        except TransportError as exc:
            raise DemoError(
                f"no API answers at {variable} ({exc}): start `make run` with the ports that "
                f"URL names, or unset {env_name('api_url')} to use (or start) the stack in "
                f"{self.paths.state_dir}"
            ) from None
        except ApiError as exc:
            if exc.status == 503:
                raise DemoError(f"the local stack at {variable} is still starting") from None
            raise DemoError(
                f"{variable} is not a local stack ({exc.status} for {LOCAL_STACK_PATH}): make demo "
                f"kills and restarts local worker processes, so it runs only against `make "
                f"run`; unset {env_name('api_url')} or point it at a local stack"
            ) from None
        return info

    def local_pids(self) -> set[int]:
        """Process ids of the stack's workers now."""
        if self._api_url:
            info = self._describe_from_api()
        else:
            info = read_stack_file(self.paths) or self.info
        return {int(w["pid"]) for w in info.get("workers", [])}

    @property
    def started_here(self) -> bool:
        """True when this demo started the stack (and so stops it at the end)."""
        return self._process is not None

    def stop_if_started(self) -> None:
        """Stop the stack if this demo started it (Ctrl-C, as a user would)."""
        if self._process is None or self._process.poll() is not None:
            return
        self._out.write("stopping the local stack started for the demo …\n")
        self._out.flush()
        os.killpg(self._process.pid, signal.SIGINT)
        try:
            self._process.wait(150)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()


def run_demo(client: ApiClient, stack: StackHandle, out: TextIO) -> int:
    """The demo proper against a running stack; returns the exit status."""
    tag = secrets.token_hex(2)
    ids = [f"demo-{tag}-{n:02d}" for n in range(1, STREAMS + 1)]
    upstream = str(stack.info["upstream_url"])
    view = DemoView(client, out, ids)
    view.note(f"starting {STREAMS} streams at {RATE_PER_SECOND} msgs/s on {upstream}")
    for stream_id in ids:
        client.create_stream(stream_id, f"{upstream}/{stream_id}?rate={RATE_PER_SECOND}")
    wanted = set(ids)
    _, took = view.show(RECOVERY_SECONDS, all_owned(wanted))
    view.note(f"all {STREAMS} streams owned after {took:.1f} s; letting them run")
    snapshot, _ = view.show(8.0)

    victim, held = busiest_worker(snapshot, stack.local_pids(), set())
    pid = int(victim["pid"])
    os.kill(pid, signal.SIGKILL)
    view.note(f"kill -9 {worker_name(victim['id'])} (pid {pid}), which held {held} streams")
    _, took = view.show(RECOVERY_SECONDS, all_owned(wanted, not_by=str(victim["id"])))
    view.note(f"all streams owned again {took:.1f} s after the kill (reaper + takeover)")
    snapshot, _ = view.show(6.0)

    rolled, held = busiest_worker(snapshot, stack.local_pids(), {pid})
    rolled_pid = int(rolled["pid"])
    os.kill(rolled_pid, signal.SIGTERM)
    name = worker_name(rolled["id"])
    view.note(f"SIGTERM {name} (pid {rolled_pid}), which held {held}: it drains")
    _, took = view.show(RECOVERY_SECONDS, all_owned(wanted, not_by=str(rolled["id"])))
    view.note(f"all streams owned again {took:.1f} s after the SIGTERM (handoffs)")
    view.show(6.0)

    reports = sink_reports(client, stack.info, ids)
    report = reports[-1][1]
    for stream_id in ids:
        client.stop_stream(stream_id)
    if view.live:  # end on a clean screen: the story, then the report
        out.write(CLEAR + "\n".join(view.story) + "\n")
    for title, shown in reports:
        out.write("\n".join(["", title, format_report(shown), ""]) + "\n")
    silent = [s.stream_id for s in report.streams if s.messages == 0]
    if silent:
        out.write(f"no records at all for: {', '.join(silent)}\n")
    return 0 if report.ok and not silent else 1


def sink_reports(
    client: ApiClient, info: dict[str, Any], ids: Sequence[str]
) -> list[tuple[str, SinkReport]]:
    """What the sink holds of ``ids``, judged (the last one decides the demo's verdict): the
    file sink's files; or the Kinesis stream twice, as stored (repeats and late records of an
    older epoch included) and as the consumer reads it (each message once, in order)."""
    args: dict[str, Any] = {
        "events_dir": info["events_dir"],
        "exits_path": info.get("exits_file"),
        "stream_ids": ids,
    }
    if info.get("sink") != "kinesis":
        return [("What the sink files hold:", build_report(info["sink_dir"], **args))]
    settings = Settings(kinesis_stream_name=str(info["kinesis_stream_name"]))
    view = load_kinesis(settings, target_for(client).client("kinesis"))
    return [
        ("The Kinesis stream as stored (raw):", build_report("", records=view.raw, **args)),
        (
            "As the consumer reads it (streamlease consume):",
            # What a reader got is judged; when the raw stream stored it is the raw view's.
            build_report("", records=view.emitted, write_tolerance_seconds=math.inf, **args),
        ),
    ]


def closing_lines(info: dict[str, Any], *, stack_stopped: bool) -> list[str]:
    """Where to look once the demo is over, true to what is still running."""
    sink, events, state = info["sink_dir"], info["events_dir"], info["state_dir"]
    kinesis = info.get("sink") == "kinesis"
    if not stack_stopped:
        where = "`streamlease consume` reads them" if kinesis else f"they are in {sink}/"
        return [
            "the demo streams are stopped and the stack keeps running: `streamlease ls` lists "
            f"them (STOPPED), `streamlease get <id>` shows one; as for their records, {where}"
        ]
    records = (
        "records went to moto's Kinesis and are gone with it"
        if kinesis
        else f"records in {sink}/<stream id>.jsonl"
    )
    return [
        "the local stack the demo started is stopped now, so `streamlease` has no API to ask.",
        f"Its files stay until the next `make run` moves them to {state}/previous/: "
        f"{records}, lease events in {events}/.",
        "To look around with `streamlease ls` and `watch` afterwards, run `make run` in one "
        "terminal and `make demo` in another: the demo then uses that stack and leaves it "
        "running.",
    ]


def main() -> int:
    """Run the demo; returns the exit status (1: an invariant broke or the demo could not run)."""
    out = sys.stdout
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    stack = StackHandle(settings, out)
    status: int | None = None
    try:
        stack.ensure_running()
        client = ApiClient(str(stack.info["api_url"]))
        status = run_demo(client, stack, out)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one readable line, not a traceback
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop_if_started()
    out.write("\n".join(closing_lines(stack.info, stack_stopped=stack.started_here)) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
