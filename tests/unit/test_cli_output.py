"""What the CLI says: its version, errors (one line; JSON with ``--json``), repeated commands,
connection states on a terminal, and the few settings it reads."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from importlib import metadata
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from cli_fake_api import FakeApi, run, serve_fake_api

SINCE = "2026-11-30T22:38:46.078Z"

STREAM: dict[str, Any] = {
    "id": "s1",
    "ws_url": "wss://feed.example.com/s1",
    "desired_state": "STARTED",
    "owner": "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12",
    "lease_state": "held",
    "lease_remaining_ms": 12_000,
    "epoch": 3,
    "last_seq": 1200,
    "generation": 1,
    "takeovers": 0,
    "last_error": None,
}


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with serve_fake_api() as fake:
        yield fake


# --- version and settings --------------------------------------------------------------------


def test_version_is_the_installed_distributions() -> None:
    """``streamlease --version`` prints the package version and exits 0, asking nothing."""
    code, out, _ = run("--version")
    assert code == 0
    assert out.strip() == f"streamlease {metadata.version('streamlease')}"


def test_a_bad_worker_setting_does_not_break_the_cli(api: FakeApi) -> None:
    """Worker and stack settings in the environment are not the CLI's: a bad one is ignored."""
    api.routes[("GET", "/streams")] = (200, {"streams": [], "next_token": None})
    environ = {"STREAMLEASE_LEASE_SECONDS": "abc", "STREAMLEASE_CAPACITY": "-1"}
    code, out, err = run("--api", api.url, "ls", environ=environ)
    assert (code, out, err) == (0, "no streams\n", "")


def test_a_bad_cli_setting_is_still_a_configuration_error() -> None:
    """The settings the CLI does read are checked and named."""
    code, _, err = run("ls", environ={"STREAMLEASE_LOCAL_API_PORT": "eighty"})
    assert code == 2
    assert "STREAMLEASE_LOCAL_API_PORT" in err and err.count("\n") == 1


# --- errors ----------------------------------------------------------------------------------


def test_json_errors_are_one_json_line_on_stderr(api: FakeApi) -> None:
    """With --json an API error is ``{"error": {...}}`` on one stderr line, stdout empty."""
    api.routes[("GET", "/streams/nope")] = (
        404,
        {"error": {"code": "not_found", "message": "stream 'nope' does not exist", "field": "id"}},
    )
    code, out, err = run("--api", api.url, "get", "nope", "--json")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert json.loads(err) == {
        "error": {
            "code": "not_found",
            "message": "stream 'nope' does not exist",
            "status": 404,
            "field": "id",
        }
    }


def test_json_usage_and_connection_errors_are_json_too() -> None:
    """A malformed command line and an unreachable API, with --json: JSON error lines."""
    code, _, err = run("--json", "frobnicate")
    assert code == 2
    assert json.loads(err)["error"]["code"] == "usage"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _, err = run("--json", "--api", f"http://127.0.0.1:{port}", "ls")
    assert code == 1
    error = json.loads(err)["error"]
    assert error["code"] == "unreachable" and "refused" in error["message"]


def test_usage_errors_are_one_line() -> None:
    """argparse's usage block is replaced by one line that points at --help."""
    code, _, err = run("get")
    assert code == 2
    assert err.count("\n") == 1
    assert "required: id" in err and "streamlease get --help" in err


def test_an_empty_stream_id_is_named_alone(api: FakeApi) -> None:
    """``start "" URL`` says the id is empty; nothing about --interval."""
    code, _, err = run("--api", api.url, "start", "", "ws://127.0.0.1:8765/x")
    assert code == 2
    assert "stream id must not be empty" in err and "interval" not in err
    code, _, err = run("--api", api.url, "watch", "--interval", "0")
    assert code == 2
    assert "--interval must be more than 0" in err and "stream id" not in err


def test_an_http_url_is_refused_with_what_a_websocket_url_is(api: FakeApi) -> None:
    """An http:// upstream: the API's refusal plus a hint naming ws:// and wss://."""
    api.routes[("POST", "/streams")] = (
        400,
        {"error": {"code": "invalid_request", "message": "ws_url: must be a wss:// URL",
                   "field": "ws_url"}},
    )  # fmt: skip
    code, _, err = run("--api", api.url, "start", "s1", "http://127.0.0.1:8765/s1")
    assert code == 1
    assert "http:// is not a WebSocket URL: use wss:// (or ws://" in err
    assert err.count("\n") == 1


def test_a_success_that_is_not_json_is_a_failure(api: FakeApi) -> None:
    """A 200 page from something that is not the API (a portal, a proxy) is not "no streams"."""
    api.routes[("GET", "/streams")] = (200, b"<html>Welcome to the hotel wifi</html>")
    code, out, err = run("--api", api.url, "ls")
    assert (code, out) == (1, "")
    assert "not the API's JSON" in err


# --- repeated commands -----------------------------------------------------------------------


def test_stopping_a_stopped_stream_says_so(api: FakeApi) -> None:
    """The API answers 200 when the stream was stopped already: the CLI says that."""
    api.routes[("POST", "/streams/s1/stop")] = (200, {**STREAM, "desired_state": "STOPPED"})
    code, out, _ = run("--api", api.url, "stop", "s1")
    assert code == 0
    assert out.startswith("already stopped: s1: STOPPED")


def test_resuming_a_started_stream_says_so(api: FakeApi) -> None:
    """``resume`` of a started stream (200) says it was started already."""
    api.routes[("POST", "/streams/s1/start")] = (200, STREAM)
    code, out, _ = run("--api", api.url, "resume", "s1")
    assert code == 0
    assert out.startswith("already started: s1: STARTED")


def test_a_real_stop_says_stopping(api: FakeApi) -> None:
    """A 202 is a change: ``stopping s1``."""
    api.routes[("POST", "/streams/s1/stop")] = (202, {**STREAM, "desired_state": "STOPPED"})
    assert run("--api", api.url, "stop", "s1")[1].startswith("stopping s1: STOPPED")


# --- connection state ------------------------------------------------------------------------


def test_get_shows_the_connection_and_what_rejected_means(api: FakeApi) -> None:
    """``get`` names the connection state, since when, and what a rejection means."""
    rejected = {
        **STREAM,
        "connection_state": "rejected",
        "connection_since": SINCE,
        "last_error": "upstream refused the handshake (HTTP 403)",
        "last_error_active": True,
    }
    api.routes[("GET", "/streams/s1")] = (200, rejected)
    code, out, _ = run("--api", api.url, "get", "s1")
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("connection:"))
    assert f"rejected since {SINCE}" in line and "nothing flows" in line
    assert "\x1b" not in out  # not a terminal: no colour


def test_ls_lists_streams_in_trouble_first_painted_and_counted(api: FakeApi) -> None:
    """On a terminal the rows of streams in trouble come first, in red, and a last line counts
    them by state; NO_COLOR turns colour off."""
    rejected = {**STREAM, "id": "s2", "connection_state": "rejected"}
    stalled = {**STREAM, "id": "s3", "connection_state": "stalled"}
    api.routes[("GET", "/streams")] = (
        200,
        {"streams": [STREAM, rejected, stalled], "next_token": None},
    )
    _, out, _ = run("--api", api.url, "ls", terminal=True)
    rows = out.splitlines()
    assert rows[1].startswith("\x1b[1;31ms2") and rows[1].endswith("\x1b[0m")
    assert rows[2].startswith("\x1b[1;31ms3")
    assert rows[3].startswith("s1") and "\x1b" not in rows[3]
    assert rows[4] == "2 streams in trouble: rejected 1, stalled 1"
    _, plain, _ = run("--api", api.url, "ls", terminal=True, environ={"NO_COLOR": "1"})
    assert "\x1b" not in plain


def test_ls_without_trouble_has_no_summary_line(api: FakeApi) -> None:
    """Healthy streams: the table alone, in the API's order."""
    api.routes[("GET", "/streams")] = (200, {"streams": [STREAM], "next_token": None})
    _, out, _ = run("--api", api.url, "ls")
    assert len(out.splitlines()) == 2


def test_ls_filters_by_connection_state(api: FakeApi) -> None:
    """``ls --connection-state rejected`` asks the API for that filter, on every page."""
    pages = {
        None: {"streams": [{**STREAM, "connection_state": "rejected"}], "next_token": "T1"},
        "T1": {"streams": [], "next_token": None},
    }
    api.routes[("GET", "/streams")] = lambda request: (
        200,
        pages[next((v for k, v in _query(request.path) if k == "next_token"), None)],
    )
    code, out, _ = run("--api", api.url, "ls", "--connection-state", "REJECTED")
    assert code == 0
    queries = [dict(_query(r.path)) for r in api.requests]
    assert [q.get("connection_state") for q in queries] == ["rejected", "rejected"]
    assert "REJECTED" in out


def test_ls_refuses_an_unknown_connection_state(api: FakeApi) -> None:
    """A misspelt state is a usage error (exit 2), and nothing is sent."""
    code, _, err = run("--api", api.url, "ls", "--connection-state", "stuck")
    assert code == 2
    assert "stalled" in err
    assert api.requests == []


def test_get_shows_the_progress_and_the_last_message(api: FakeApi) -> None:
    """``get`` shows the holder's counts, when it reported them, and when the last message
    was received."""
    stream = {
        **STREAM,
        "connection_state": "stalled",
        "connection_since": SINCE,
        "frames_received": 1204,
        "frames_delivered": 1200,
        "frames_malformed": 4,
        "seq_gaps": 1,
        "progress_at": SINCE,
        "last_message_at": SINCE,
    }
    api.routes[("GET", "/streams/s1")] = (200, stream)
    _, out, _ = run("--api", api.url, "get", "s1")
    lines = {line.split(":", 1)[0]: line for line in out.splitlines()}
    assert "received 1204, delivered 1200, malformed 4, gaps 1 (reported " in lines["progress"]
    assert lines["last message"].startswith(f"last message:  {SINCE} (")
    assert "the upstream has sent nothing" in lines["connection"]


def test_json_output_passes_the_api_fields_through(api: FakeApi) -> None:
    """``ls --json`` is the API's data: connection fields included, nothing rendered."""
    stream = {**STREAM, "connection_state": "retrying", "connection_since": SINCE}
    api.routes[("GET", "/streams")] = (200, {"streams": [stream], "next_token": None})
    code, out, _ = run("--api", api.url, "ls", "--json")
    assert code == 0
    assert json.loads(out)["streams"][0]["connection_state"] == "retrying"


def _query(path: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(path).query)


def test_get_shows_the_profile_by_reference_and_the_failover_note(api: FakeApi) -> None:
    """The profile as the API holds it (secrets by reference only), and what a failover costs
    a feed without a sequence; a stream without one says ``default``."""
    profile = {
        "headers": {"Authorization": "Bearer {secret:streamlease/feed#token}"},
        "seq": "none",
        "resume": "none",
    }
    note = "the upstream has no sequence: a failover can lose or repeat"
    api.routes[("GET", "/streams/s1")] = (
        200,
        {**STREAM, "profile": profile, "failover_note": note},
    )
    code, out, _ = run("--api", api.url, "get", "s1")
    assert code == 0
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("profile:"))
    assert lines[start].endswith(
        'headers {"Authorization":"Bearer {secret:streamlease/feed#token}"}'
    )
    assert lines[start + 1].split() == ["resume", "none"]
    assert lines[start + 2].split() == ["seq", "none"]
    assert f"failover:      {note}" in lines
    api.routes[("GET", "/streams/s1")] = (200, {**STREAM, "profile": None})
    assert "profile:       default" in run("--api", api.url, "get", "s1")[1].splitlines()


def test_the_local_apis_hint_for_an_unknown_route_is_shown(api: FakeApi) -> None:
    """A wrong base path locally: the 403 carries which routes there are, and the CLI says it."""
    hint = "no route for GET /v1/streams; the routes are GET /streams, ..."
    api.routes[("GET", "/v1/streams")] = (
        403,
        {"message": "Missing Authentication Token", "hint": hint},
    )
    code, _, err = run("--api", api.url + "/v1", "ls")
    assert code == 1
    assert f"Missing Authentication Token: {hint} [403]" in err
