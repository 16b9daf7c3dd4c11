"""The streamlease CLI against a tiny recording HTTP server: arguments, output, errors, SigV4."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from cli_fake_api import FakeApi, Recorded, run, serve_fake_api

from streamlease.cli.signing import execute_api_region
from streamlease.cli.transport import ConnectTo, HttpTransport

EXECUTE_API = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"

STREAM = {
    "id": "s1",
    "ws_url": "wss://feed.example.com/s1?token=hunter2",
    "desired_state": "STARTED",
    "owner": "0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12",
    "lease_expires_at_ms": 1_900_000_000_000,
    "lease_remaining_ms": 12_300,
    "owned_since": "2026-01-01T00:00:00.000Z",
    "epoch": 3,
    "last_seq": 1200,
    "generation": 1,
    "takeovers": 1,
    "last_error": None,
}


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with serve_fake_api() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """No real AWS configuration or streamlease settings leak into a test."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "STREAMLEASE_API_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["start", "s1"],
        ["frobnicate"],
        ["ls", "--state", "RUNNING"],
        ["watch", "--interval", "0"],
        ["get", ""],
        ["get", "has space"],
        ["get", "-", "--"],
        ["set", "bad/id", "--url", "wss://x.example/"],
        ["stop", "ok", "caf\u00e9"],
        ["rm", "." + "x" * 10],
        ["start", "no space", "wss://x.example/"],
        ["--api", "ftp://example.com", "ls"],
        ["--api", "http://127.0.0.1:1/?x=1", "ls"],
        ["set", "s1", "--header", "no-equals-sign"],
        ["set", "s1", "--open-message", "@/nonexistent/subscribe.json"],
        ["consume", "bad/id"],
        ["consume", "ok", "has space"],
        ["secret", "put", ""],
        ["secret", "put", "has space"],
        ["secret", "put", "streamlease/feed#token"],
        ["secret", "put", "arn:aws:secretsmanager:us-east-1:1:secret:x"],
        ["workers", "extra"],
        ["stop", "--wait", "--wait-timeout", "0", "s1"],
    ],
)
def test_usage_errors_exit_2_without_calling_the_api(api: FakeApi, argv: list[str]) -> None:
    """A malformed command line is a usage error (exit 2) and sends nothing."""
    code, _, err = run(*argv)
    assert code == 2
    assert err.strip()
    assert api.requests == []


def test_a_bad_setting_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unparsable STREAMLEASE_* variable is reported with its name and exit code 2."""
    monkeypatch.setenv("STREAMLEASE_LOCAL_API_PORT", "eighty")
    code, _, err = run("ls")
    assert code == 2
    assert "STREAMLEASE_LOCAL_API_PORT" in err


def test_global_options_work_after_the_command(api: FakeApi) -> None:
    """``streamlease get ID --api URL --json`` means the same as with the options first."""
    api.routes[("GET", "/streams/s1")] = (200, STREAM)
    code, out, _ = run("get", "s1", "--api", api.url, "--json")
    assert code == 0
    assert json.loads(out)["id"] == "s1"


def test_api_url_comes_from_the_environment(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --api the CLI uses STREAMLEASE_API_URL."""
    monkeypatch.setenv("STREAMLEASE_API_URL", api.url)
    api.routes[("GET", "/workers")] = (200, {"workers": []})
    assert run("workers")[0] == 0
    assert api.requests[0].path == "/workers"


def test_default_api_is_the_local_stack(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --api or STREAMLEASE_API_URL the CLI talks to the local stack's host and port."""
    monkeypatch.setenv("STREAMLEASE_LOCAL_API_PORT", str(api.port))
    api.routes[("GET", "/workers")] = (200, {"workers": []})
    assert run("workers")[0] == 0
    assert len(api.requests) == 1


# --- calls and output ------------------------------------------------------------------------


def test_start_posts_id_and_url_and_reports_creation(api: FakeApi) -> None:
    """``start ID URL`` sends POST /streams {"id", "ws_url"} and says the stream was created."""
    api.routes[("POST", "/streams")] = (201, STREAM)
    code, out, _ = run("--api", api.url, "start", "s1", STREAM["ws_url"])
    assert code == 0
    request = api.requests[0]
    assert json.loads(request.body) == {"id": "s1", "ws_url": STREAM["ws_url"]}
    assert request.headers["Content-Type"] == "application/json"
    assert out.startswith("created s1: STARTED")


def test_start_again_with_the_same_url_says_unchanged(api: FakeApi) -> None:
    """A 200 answer to POST /streams is reported as a no-op."""
    api.routes[("POST", "/streams")] = (200, STREAM)
    code, out, _ = run("--api", api.url, "start", "s1", STREAM["ws_url"])
    assert code == 0
    assert "unchanged" in out


@pytest.mark.parametrize(
    ("argv", "method", "path"),
    [
        (["stop", "s1"], "POST", "/streams/s1/stop"),
        (["resume", "s1"], "POST", "/streams/s1/start"),
        (["get", "a:b_c"], "GET", "/streams/a%3Ab_c"),
        (["rm", "s1"], "DELETE", "/streams/s1"),
        (["workers"], "GET", "/workers"),
    ],
)
def test_each_command_calls_its_route(
    api: FakeApi, argv: list[str], method: str, path: str
) -> None:
    """Every command maps to one API call; stream ids are escaped as one path segment."""
    api.routes[(method, path)] = (202 if method == "POST" else 200, STREAM)
    code, _, err = run("--api", api.url, *argv)
    assert code == 0, err
    assert (api.requests[0].method, api.requests[0].path) == (method, path)


def test_ls_follows_next_token_and_filters_by_state(api: FakeApi) -> None:
    """``ls --state`` asks for that state and reads every page."""
    pages = iter(
        [
            (200, {"streams": [STREAM], "next_token": "t/1+"}),
            (200, {"streams": [{**STREAM, "id": "s2"}], "next_token": None}),
        ]
    )

    class Pages(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            return next(pages)

    api.routes = Pages()
    code, out, _ = run("--api", api.url, "ls", "--state", "started", "--json")
    assert code == 0
    assert [s["id"] for s in json.loads(out)["streams"]] == ["s1", "s2"]
    assert "state=STARTED" in api.requests[0].path
    assert "next_token=t%2F1%2B" in api.requests[1].path


def test_human_output_hides_url_secrets(api: FakeApi) -> None:
    """``get`` and ``ls`` never print an upstream URL's query string (it may hold a token)."""
    api.routes[("GET", "/streams/s1")] = (200, STREAM)
    api.routes[("GET", "/streams")] = (200, {"streams": [STREAM], "next_token": None})
    for argv in (["get", "s1"], ["ls"]):
        code, out, _ = run("--api", api.url, *argv)
        assert code == 0
        assert "hunter2" not in out
    assert "wss://feed.example.com/s1?…" in run("--api", api.url, "get", "s1")[1]


def test_get_shows_owner_epoch_last_seq_and_lease_left(api: FakeApi) -> None:
    """The human view of one stream names what an operator asks first."""
    api.routes[("GET", "/streams/s1")] = (200, STREAM)
    out = run("--api", api.url, "get", "s1")[1]
    assert "epoch:" in out and "3" in out
    assert "last seq:" in out and "1200" in out
    assert "lease left:    12s" in out


# --- errors ----------------------------------------------------------------------------------


def test_api_error_is_one_line_with_code_and_field(api: FakeApi) -> None:
    """An error body {"error": {...}} becomes one stderr line and exit code 1."""
    api.routes[("POST", "/streams")] = (
        409,
        {"error": {"code": "CONFLICT", "message": "s1 exists with another url", "field": "ws_url"}},
    )
    code, out, err = run("--api", api.url, "start", "s1", "wss://other.example.com/")
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert "s1 exists with another url" in err
    assert "field: ws_url" in err and "409 CONFLICT" in err


def test_api_gateway_errors_are_readable(api: FakeApi) -> None:
    """API Gateway's own {"message": ...} errors (multi-line) still give one line."""
    api.routes[("GET", "/workers")] = (403, {"message": "The request signature\nwe calculated"})
    code, _, err = run("--api", api.url, "workers")
    assert code == 1
    assert err.strip() == "streamlease: The request signature we calculated [403]"


def test_non_json_error_bodies_are_cut_to_one_line(api: FakeApi) -> None:
    """A 502 with an HTML body yields its first line, exit code 1."""
    api.routes[("GET", "/workers")] = (502, b"Bad Gateway\n<html>...</html>")
    code, _, err = run("--api", api.url, "workers")
    assert code == 1
    assert err.strip() == "streamlease: Bad Gateway [502]"


def test_unreachable_api_is_exit_1_with_a_hint() -> None:
    """Connection refused names the URL and, for the local stack, hints at ``make run``."""
    port = free_port()
    code, _, err = run("--api", f"http://127.0.0.1:{port}", "ls")
    assert code == 1
    assert f"cannot reach the API at http://127.0.0.1:{port}" in err
    assert "refused" in err


# --- SigV4 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://abc123.execute-api.us-east-1.amazonaws.com/prod", "us-east-1"),
        ("https://x9.execute-api.eu-central-2.amazonaws.com", "eu-central-2"),
        ("https://a1.execute-api.cn-north-1.amazonaws.com.cn/v1", "cn-north-1"),
        ("https://a1-vpce-0ab.execute-api.us-gov-west-1.vpce.amazonaws.com/p", "us-gov-west-1"),
        ("http://127.0.0.1:8080", None),
        ("https://execute-api.us-east-1.amazonaws.com.evil.example/prod", None),
        ("https://api.example.com/prod", None),
    ],
)
def test_region_is_parsed_from_execute_api_hosts_only(url: str, region: str | None) -> None:
    """Only a real execute-api host name yields a signing region."""
    assert execute_api_region(url) == region


def _verify_signature(request: Recorded, secret: str, region: str) -> None:
    """Recompute the signature over exactly what arrived (path, headers, body)."""
    authorization = request.headers["Authorization"]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    lower = {k.lower(): v for k, v in request.headers.items()}
    host = lower["host"]
    again = AWSRequest(
        method=request.method,
        url=f"https://{host}{request.path}",
        data=request.body,
        headers={name: lower[name] for name in signed},
    )
    again.context["timestamp"] = lower["x-amz-date"]
    creds = Credentials("AKIDEXAMPLE", secret, lower.get("x-amz-security-token"))
    auth = SigV4Auth(creds, "execute-api", region)
    signature = auth.signature(auth.string_to_sign(again, auth.canonical_request(again)), again)
    assert authorization.endswith(f"Signature={signature}")


def test_execute_api_requests_are_sigv4_signed(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against an execute-api URL the request carries a valid SigV4 signature for its region."""
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-1")
    api.routes[("POST", "/prod/streams")] = (201, STREAM)
    transport = HttpTransport(ConnectTo("127.0.0.1", api.port))
    code, _, err = run("--api", EXECUTE_API, "start", "s1", "wss://x.example/", transport=transport)
    assert code == 0, err
    request = api.requests[0]
    assert request.headers["Host"] == "abc123.execute-api.us-east-1.amazonaws.com"
    assert request.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/execute-api/aws4_request" in request.headers["Authorization"]
    assert request.headers["X-Amz-Security-Token"] == "session-token-1"
    assert "X-Amz-Date" in request.headers
    _verify_signature(request, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1")


def test_signed_query_strings_verify(api: FakeApi) -> None:
    """Query parameters with reserved characters are signed as they are sent."""
    api.routes[("GET", "/prod/streams")] = (200, {"streams": [], "next_token": None})
    transport = HttpTransport(ConnectTo("127.0.0.1", api.port))
    code, _, _ = run("--api", EXECUTE_API, "ls", "--state", "STOPPED", transport=transport)
    assert code == 0
    _verify_signature(api.requests[0], "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1")


def test_local_requests_are_not_signed(api: FakeApi) -> None:
    """A non-execute-api URL gets no Authorization header."""
    api.routes[("GET", "/workers")] = (200, {"workers": []})
    run("--api", api.url, "workers")
    assert "Authorization" not in api.requests[0].headers


def test_missing_credentials_is_exit_1(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials anywhere in the chain: a clear message, nothing sent."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    transport = HttpTransport(ConnectTo("127.0.0.1", api.port))
    code, _, err = run("--api", EXECUTE_API, "workers", transport=transport)
    assert code == 1
    assert "no AWS credentials" in err
    assert api.requests == []
