"""``streamlease start``'s connection-profile flags: what reaches ``POST /streams``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_fake_api import FakeApi, Recorded, run, serve_fake_api


def created(request: Recorded) -> tuple[int, Any]:
    body = json.loads(request.body)
    return 201, {"id": body["id"], "desired_state": "STARTED", "owner": None, "generation": 1}


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with serve_fake_api() as fake:
        fake.routes[("POST", "/streams")] = created
        yield fake


def sent(api: FakeApi) -> dict[str, dict[str, Any]]:
    bodies = (json.loads(r.body) for r in api.requests)
    return {body["id"]: body for body in bodies}


def test_no_profile_flag_sends_no_profile(api: FakeApi) -> None:
    """Without flags the request is exactly what it was: the default profile is the API's."""
    code, _, err = run("--api", api.url, "start", "s1", "wss://x.example/1")
    assert code == 0, err
    assert "profile" not in sent(api)["s1"]


def test_flags_build_the_profile(api: FakeApi, tmp_path: Path) -> None:
    """Headers (repeatable, the value may contain '='), subprotocols, the open message from a
    file (its trailing newline dropped), the seq path and the resume method."""
    subscribe = tmp_path / "subscribe.json"
    subscribe.write_text('{"type":"subscribe","from":{next_seq}}\n')
    code, _, err = run(
        "--api",
        api.url,
        "start",
        "s1",
        "wss://x.example/1",
        "--header",
        "Authorization=Bearer {secret:streamlease/feed#token}",
        "--header",
        "X-Region=eu=1",
        "--subprotocol",
        "v2.feed",
        "--subprotocol",
        "v1.feed",
        "--open-message",
        f"@{subscribe}",
        "--seq-path",
        "data.u",
        "--resume",
        "open_message",
    )
    assert code == 0, err
    assert sent(api)["s1"]["profile"] == {
        "headers": {
            "Authorization": "Bearer {secret:streamlease/feed#token}",
            "X-Region": "eu=1",
        },
        "subprotocols": ["v2.feed", "v1.feed"],
        "open_message": '{"type":"subscribe","from":{next_seq}}',
        "seq": "data.u",
        "resume": "open_message",
    }


def test_flags_replace_keys_of_a_profile_file(api: FakeApi, tmp_path: Path) -> None:
    """``--profile @FILE`` is the base; a flag replaces the key it names, headers merge."""
    base = tmp_path / "profile.json"
    base.write_text(json.dumps({"headers": {"X-A": "1"}, "seq": "sequence", "resume": "none"}))
    code, _, err = run(
        "--api",
        api.url,
        "start",
        "s1",
        "wss://x.example/1",
        "--profile",
        f"@{base}",
        "--header",
        "X-B=2",
        "--seq-path",
        "none",
    )
    assert code == 0, err
    assert sent(api)["s1"]["profile"] == {
        "headers": {"X-A": "1", "X-B": "2"},
        "seq": "none",
        "resume": "none",
    }


def test_every_stream_of_the_command_gets_the_profile_unless_its_line_has_one(
    api: FakeApi,
) -> None:
    """With ``-f``, a line's own ``profile`` wins over the flags."""
    lines = (
        json.dumps({"id": "s1", "ws_url": "wss://x.example/1"})
        + "\n"
        + json.dumps({"id": "s2", "ws_url": "wss://x.example/2", "profile": {"seq": "u"}})
        + "\n"
    )
    code, _, err = run("--api", api.url, "start", "-f", "-", "--seq-path", "data.seq", stdin=lines)
    assert code == 0, err
    assert sent(api)["s1"]["profile"] == {"seq": "data.seq"}
    assert sent(api)["s2"]["profile"] == {"seq": "u"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--header", "Authorization"], "--header 'Authorization': expected NAME=VALUE"),
        (["--header", "=x"], "expected NAME=VALUE"),
        (["--profile", "[1]"], "--profile must be a JSON object"),
        (["--profile", "{nope"], "--profile: not JSON"),
        (["--profile", "@/nonexistent/profile.json"], "cannot read /nonexistent/profile.json"),
        (["--open-message", "@/nonexistent/sub.json"], "--open-message: cannot read"),
        (["--resume", "sometimes"], "invalid choice"),
    ],
)
def test_a_bad_flag_is_a_usage_error_and_sends_nothing(
    api: FakeApi, flags: list[str], message: str
) -> None:
    code, out, err = run("--api", api.url, "start", "s1", "wss://x.example/1", *flags)
    assert code == 2
    assert message in err
    assert api.requests == []
    assert out == ""


def test_a_profile_line_that_is_not_an_object_is_refused(api: FakeApi) -> None:
    lines = json.dumps({"id": "s1", "ws_url": "wss://x.example/1", "profile": "seq"}) + "\n"
    code, _, err = run("--api", api.url, "start", "-f", "-", stdin=lines)
    assert code == 2
    assert 'stdin, line 1: "profile" must be a JSON object' in err
    assert api.requests == []


def test_the_apis_refusal_names_the_profile_field(api: FakeApi) -> None:
    """The API checks the profile; its error (with the field path) is what the user sees."""
    refusal = {
        "error": {
            "code": "invalid_request",
            "message": "profile.headers.Authorization: credentials must be a secret reference",
            "field": "profile.headers.Authorization",
        }
    }
    api.routes[("POST", "/streams")] = (400, refusal)
    code, _, err = run(
        "--api", api.url, "start", "s1", "wss://x.example/1", "--header", "Authorization=abc"
    )
    assert code != 0
    assert "profile.headers.Authorization" in err


def test_stop_takes_no_profile_flags(api: FakeApi) -> None:
    code, _, err = run("--api", api.url, "stop", "s1", "--seq-path", "u")
    assert code == 2
    assert "unrecognized arguments" in err


CURRENT: dict[str, Any] = {
    "id": "s1",
    "generation": 3,
    "desired_state": "STARTED",
    "owner": "w-1",
    "profile": {"headers": {"X-Client": "ops"}, "seq": "data.u"},
}


def changed(request: Recorded) -> tuple[int, Any]:
    body = json.loads(request.body)
    profile = body.get("profile", CURRENT["profile"])
    return 202, {**CURRENT, "generation": 4, "profile": profile or None}


def test_set_adds_a_header_to_the_current_profile_in_one_patch(api: FakeApi) -> None:
    """``set --header`` keeps the rest of the stream's profile (read first); the URL too."""
    api.routes[("GET", "/streams/s1")] = (200, CURRENT)
    api.routes[("PATCH", "/streams/s1")] = changed
    code, out, err = run(
        "--api",
        api.url,
        "set",
        "s1",
        "--url",
        "wss://feed-2.example/1",
        "--header",
        "Last-Event-ID={last_seq}",
        "--resume",
        "header",
    )
    assert code == 0, err
    patch = [r for r in api.requests if r.method == "PATCH"]
    assert len(patch) == 1
    assert json.loads(patch[0].body) == {
        "ws_url": "wss://feed-2.example/1",
        "profile": {
            "headers": {"X-Client": "ops", "Last-Event-ID": "{last_seq}"},
            "seq": "data.u",
            "resume": "header",
        },
    }
    assert "changed s1" in out and "generation 4" in out


def test_set_with_a_whole_profile_replaces_it_and_reads_nothing(api: FakeApi) -> None:
    api.routes[("PATCH", "/streams/s1")] = changed
    code, _, err = run(
        "--api", api.url, "set", "s1", "--profile", '{"query":{"after":"{last_seq}"}}'
    )
    assert code == 0, err
    assert [r.method for r in api.requests] == ["PATCH"]
    assert json.loads(api.requests[0].body) == {"profile": {"query": {"after": "{last_seq}"}}}


def test_set_to_what_is_already_so_says_unchanged(api: FakeApi) -> None:
    """The API's 200 (nothing changed, same generation) reads as ``start``'s does."""
    api.routes[("PATCH", "/streams/s1")] = (200, CURRENT)
    code, out, err = run("--api", api.url, "set", "s1", "--url", "wss://feed.example/1")
    assert code == 0, err
    assert out.startswith("exists, unchanged: s1:") and "changed s1" not in out


@pytest.mark.parametrize(("status", "result"), [(202, "changed"), (200, "unchanged")])
def test_set_json_is_the_result_document_of_every_mutation(
    api: FakeApi, status: int, result: str
) -> None:
    """``set --json`` has the shape of ``start``/``stop``/``rm --json``: results and summary."""
    api.routes[("PATCH", "/streams/s1")] = (status, CURRENT)
    code, out, err = run("--api", api.url, "--json", "set", "s1", "--url", "wss://feed.example/1")
    assert code == 0, err
    document = json.loads(out)
    assert [(r["id"], r["result"]) for r in document["results"]] == [("s1", result)]
    assert document["results"][0]["stream"]["id"] == "s1"
    assert document["summary"]["total"] == 1


def test_set_json_carries_a_refusal_in_the_same_document(api: FakeApi) -> None:
    refused = {"error": {"code": "invalid_url", "message": "no", "field": "ws_url"}}
    api.routes[("PATCH", "/streams/s1")] = (400, refused)
    code, out, _ = run("--api", api.url, "--json", "set", "s1", "--url", "wss://feed.example/1")
    assert code == 1
    assert json.loads(out)["results"][0]["error"]["field"] == "ws_url"


def test_set_without_a_change_is_a_usage_error(api: FakeApi) -> None:
    code, _, err = run("--api", api.url, "set", "s1")
    assert code == 2
    assert "--url" in err
    assert api.requests == []


WARNED = {**CURRENT, "warnings": ["secret streamlease/feed does not exist (yet): ..."]}


def test_a_warning_in_the_answer_is_a_stderr_line_and_not_a_failure(api: FakeApi) -> None:
    """``start`` of a stream whose secret is missing: created (exit 0), the warning on stderr."""
    api.routes[("POST", "/streams")] = (201, WARNED)
    code, out, err = run("--api", api.url, "start", "s1", "wss://feed.example/1")
    assert code == 0
    assert out.startswith("created s1")
    assert err == "streamlease: warning: s1: secret streamlease/feed does not exist (yet): ...\n"


def test_with_json_a_warning_stays_in_the_stream(api: FakeApi) -> None:
    api.routes[("PATCH", "/streams/s1")] = (202, WARNED)
    code, out, err = run("--api", api.url, "--json", "set", "s1", "--url", "wss://feed.example/1")
    assert (code, err) == (0, "")
    assert json.loads(out)["results"][0]["stream"]["warnings"] == WARNED["warnings"]
