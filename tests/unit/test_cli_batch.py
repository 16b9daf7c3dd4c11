"""Many streams in one ``streamlease start``/``stop``: arguments, JSON lines, keep-alive,
bounded concurrency, a summary and the exit code."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_fake_api import FakeApi, Recorded, run, serve_fake_api

from streamlease.cli.batch import InputError, Target, targets_from_lines


def stream(stream_id: str, state: str = "STARTED") -> dict[str, Any]:
    return {"id": stream_id, "desired_state": state, "owner": None, "generation": 1}


def created(request: Recorded) -> tuple[int, Any]:
    body = json.loads(request.body)
    if body["id"].startswith("bad"):
        error = {"code": "invalid_request", "message": "id: must be ...", "field": "id"}
        return 400, {"error": error}
    return 201, stream(body["id"])


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with serve_fake_api() as fake:
        fake.routes[("POST", "/streams")] = created
        for n in range(40):
            fake.routes[("POST", f"/streams/s{n}/stop")] = (202, stream(f"s{n}", "STOPPED"))
        yield fake


def lines_of(*streams: dict[str, Any]) -> str:
    return "".join(json.dumps(s) + "\n" for s in streams)


def test_start_takes_several_id_url_pairs(api: FakeApi) -> None:
    """``start ID URL ID URL``: one POST per pair, a line each, a summary, exit 0."""
    code, out, err = run(
        "--api", api.url, "start", "s1", "wss://x.example/1", "s2", "wss://x.example/2"
    )
    assert code == 0, err
    sent = sorted((json.loads(r.body)["id"], json.loads(r.body)["ws_url"]) for r in api.requests)
    assert sent == [("s1", "wss://x.example/1"), ("s2", "wss://x.example/2")]
    assert "created s1: STARTED" in out and "created s2: STARTED" in out
    assert out.splitlines()[-1].startswith("start: 2 streams in ")
    assert out.splitlines()[-1].endswith(": 2 created, 0 failed")


def test_start_reads_json_lines_from_stdin(api: FakeApi) -> None:
    """``start -f -``: one ``{"id", "ws_url"}`` object per line; blank and # lines skipped."""
    text = "# streams for the demo\n\n" + lines_of(
        {"id": "s1", "ws_url": "wss://x.example/1"}, {"id": "s2", "ws_url": "wss://x.example/2"}
    )
    code, out, _ = run("--api", api.url, "start", "-f", "-", stdin=text)
    assert code == 0
    assert sorted(json.loads(r.body)["id"] for r in api.requests) == ["s1", "s2"]
    assert "2 created, 0 failed" in out


def test_the_file_that_started_streams_stops_them(api: FakeApi, tmp_path: Path) -> None:
    """``stop -f FILE`` reads the ids of a start file (its URLs ignored)."""
    path = tmp_path / "streams.jsonl"
    path.write_text(lines_of(*({"id": f"s{n}", "ws_url": f"wss://x.example/{n}"} for n in (1, 2))))
    assert run("--api", api.url, "start", "-f", str(path))[0] == 0
    code, out, _ = run("--api", api.url, "stop", "-f", str(path))
    assert code == 0
    assert sorted(r.path for r in api.requests if r.path.endswith("/stop")) == [
        "/streams/s1/stop",
        "/streams/s2/stop",
    ]
    assert "2 stopping, 0 failed" in out


def test_stop_takes_bare_ids_on_stdin_and_arguments_together(api: FakeApi) -> None:
    """``stop s1 -f -`` with ids one per line: every one of them is stopped."""
    code, _, _ = run("--api", api.url, "stop", "s1", "-f", "-", stdin="s2\ns3\n")
    assert code == 0
    assert sorted(r.path for r in api.requests) == [f"/streams/s{n}/stop" for n in (1, 2, 3)]


def test_many_requests_share_keep_alive_connections(api: FakeApi) -> None:
    """Thirty stops with --concurrency 3 use at most three connections, not thirty."""
    ids = [f"s{n}" for n in range(30)]
    code, _, err = run("--api", api.url, "stop", *ids, "--concurrency", "3")
    assert code == 0, err
    assert len(api.requests) == 30
    assert api.connections <= 3


def test_concurrency_is_bounded_and_used(api: FakeApi) -> None:
    """No more than --concurrency requests are in flight at once, and more than one is."""
    api.delay_seconds = 0.05
    code, _, _ = run("--api", api.url, "stop", *(f"s{n}" for n in range(12)), "--concurrency", "4")
    assert code == 0
    assert 1 < api.most_in_flight <= 4


def test_one_failure_is_reported_and_the_rest_are_done(api: FakeApi) -> None:
    """A stream the API refuses: its own error line on stderr, the others created, exit 1."""
    code, out, err = run(
        "--api", api.url, "start", "s1", "wss://x/1", "bad1", "wss://x/2", "s3", "wss://x/3"
    )
    assert code == 1
    assert err.splitlines() == [
        "streamlease: start bad1: id: must be ... (field: id) [400 invalid_request]"
    ]
    assert "created s1" in out and "created s3" in out
    assert "2 created, 1 failed" in out.splitlines()[-1]


def test_json_results_come_in_input_order_with_errors(api: FakeApi) -> None:
    """``--json``: one document, a result or an error object per stream, and a summary."""
    code, out, err = run(
        "--api", api.url, "--json", "start", "-f", "-",
        stdin=lines_of(*({"id": i, "ws_url": "wss://x/"} for i in ("s1", "bad2", "s3"))),
    )  # fmt: skip
    assert code == 1
    assert err == ""
    document = json.loads(out)
    assert [r["id"] for r in document["results"]] == ["s1", "bad2", "s3"]
    assert document["results"][0]["result"] == "created"
    assert document["results"][0]["stream"]["id"] == "s1"
    assert document["results"][1]["error"]["field"] == "id"
    assert document["summary"]["created"] == 2 and document["summary"]["failed"] == 1


def test_an_unreachable_api_stops_the_batch() -> None:
    """No answer at all: the batch stops at once, says how many were not sent, exit 1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ids = [f"s{n}" for n in range(50)]
    code, out, err = run("--api", f"http://127.0.0.1:{port}", "stop", *ids, "--concurrency", "2")
    assert code == 1
    assert "connection refused" in err
    assert "not sent (the command may be repeated safely)" in err
    assert "not sent" in out.splitlines()[-1]
    assert len(err.splitlines()) < 10


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["start", "s1", "wss://x/1", "s2"], "", "pairs of a stream id and its URL"),
        (["start", "-f", "-"], '{"id": "s1"}\n', 'stdin, line 1: expected a string "ws_url"'),
        (["start", "-f", "-"], "s1 wss://x/\n", "stdin, line 1: expected a JSON object"),
        (["stop", "-f", "-"], "s1\n{oops\n", "stdin, line 2: not JSON"),
        (["stop", "-f", "-"], '{"id": ""}\n', "stdin, line 1: a stream id must not be empty"),
        (["stop", "-f", "/nonexistent/streams.jsonl"], "", "cannot read /nonexistent/"),
        (["stop"], "", "stop needs ID arguments or -f FILE"),
        (["stop", "s1", "--concurrency", "0"], "", "--concurrency must be from 1 to 64"),
    ],
)
def test_bad_input_is_a_usage_error_and_sends_nothing(
    api: FakeApi, argv: list[str], stdin: str, message: str
) -> None:
    """A list that cannot be read is refused whole (exit 2, one line), before any request."""
    code, _, err = run("--api", api.url, *argv, stdin=stdin)
    assert code == 2
    assert message in err and err.count("\n") == 1
    assert api.requests == []


def test_json_lines_keep_other_keys_out_of_a_stop() -> None:
    """A stop line may carry any keys (a line of a start file): only the id counts."""
    lines = ['{"id": "a", "ws_url": "wss://x/", "note": 1}', "b", "  ", "# c"]
    assert targets_from_lines(lines, with_url=False, source="f") == [Target("a"), Target("b")]
    with pytest.raises(InputError, match="f, line 2"):
        targets_from_lines(lines, with_url=True, source="f")
