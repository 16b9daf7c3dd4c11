"""API input rules: every rejection is a 4xx JSON error naming the field; nothing is written."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from control_plane_support import Api, api_event

from lambdas import runtime
from lambdas.api import handler
from local.lambda_context import LambdaContext
from streamlease.settings import Settings

URL = "wss://feed.example.com/v1"


def table_items(rt: runtime.Runtime) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = rt.dynamodb.scan(TableName=rt.settings.table_name)["Items"]
    return items


@pytest.fixture
def local_mode(aws_settings: Settings) -> Iterator[runtime.Runtime]:
    """The local stack's policy: ws:// and loopback allowed, nothing else relaxed."""
    yield runtime.configure(
        dataclasses.replace(aws_settings, allow_insecure_ws=True, allow_loopback_upstreams=True)
    )
    runtime.configure(Settings())


@pytest.fixture
def allow_listed(aws_settings: Settings) -> Iterator[runtime.Runtime]:
    """Only *.example.com upstreams."""
    yield runtime.configure(dataclasses.replace(aws_settings, allowed_hosts=("*.example.com",)))
    runtime.configure(Settings())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"id": "", "ws_url": URL}, "id"),
        ({"id": "-leading-dash", "ws_url": URL}, "id"),
        ({"id": ".dot", "ws_url": URL}, "id"),
        ({"id": "has/slash", "ws_url": URL}, "id"),
        ({"id": "has space", "ws_url": URL}, "id"),
        ({"id": "x" * 129, "ws_url": URL}, "id"),
        ({"id": "caf\u00e9", "ws_url": URL}, "id"),
        ({"id": 5, "ws_url": URL}, "id"),
        ({"id": None, "ws_url": URL}, "id"),
        ({"ws_url": URL}, "id"),
        ({"id": "s1"}, "ws_url"),
        ({"id": "s1", "ws_url": 7}, "ws_url"),
        ({"id": "s1", "ws_url": ""}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://example.com/" + "a" * 2040}, "ws_url"),
        ({"id": "s1", "ws_url": "ws://feed.example.com/"}, "ws_url"),
        ({"id": "s1", "ws_url": "https://feed.example.com/"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://user:pw@feed.example.com/"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://feed.example.com/#frag"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://169.254.169.254/latest"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://169.254.170.2/v2/credentials"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://[fd00:ec2::254]/"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://2852039166/"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://0x7f.1/"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://[::ffff:127.0.0.1]/"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://10.1.2.3/"}, "ws_url"),
        ({"id": "s1", "ws_url": "wss://localhost/"}, "ws_url"),
        ({"id": "s1", "ws_url": URL, "owner": "me"}, "owner"),
        ({"id": "s1", "ws_url": URL, "desired_state": "STOPPED"}, "desired_state"),
    ],
)
def test_invalid_create_is_400_naming_the_field(
    api: Api, control_plane: runtime.Runtime, body: dict[str, Any], field: str
) -> None:
    """Each broken rule answers 400 with the offending field, and writes nothing."""
    result = api("POST", "/streams", body=body)
    assert result.status == 400, result.body
    assert result.error["field"] == field
    assert result.error["message"]
    assert table_items(control_plane) == []


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{", "invalid_json"),
        ("not json", "invalid_json"),
        ('{"id": "s1", "ws_url": "' + URL + '"', "invalid_json"),
        ("[" * 5000 + "]" * 5000, "payload_too_large"),
        ("[" * 3000 + "]" * 3000, "invalid_json"),
        ('{"id": 1' + "0" * 5000 + "}", "invalid_json"),
        ("[]", "invalid_request"),
        ('"a string"', "invalid_request"),
        ("null", "invalid_request"),
        ("{}", "invalid_request"),
    ],
)
def test_malformed_bodies_are_4xx(
    api: Api, control_plane: runtime.Runtime, raw: str, code: str
) -> None:
    """Bodies that are not a JSON object (or not JSON at all) are refused without a write."""
    result = api("POST", "/streams", raw_body=raw)
    assert 400 <= result.status < 500
    assert result.error["code"] == code
    assert table_items(control_plane) == []


def test_oversized_body_is_413(api: Api, control_plane: runtime.Runtime) -> None:
    """A body over max_body_bytes is refused before it is parsed."""
    body = {"id": "s1", "ws_url": URL, "pad": "x" * control_plane.settings.max_body_bytes}
    result = api("POST", "/streams", body=body)
    assert (result.status, result.error["field"]) == (413, "body")
    assert table_items(control_plane) == []


def test_non_json_content_type_is_415(api: Api, control_plane: runtime.Runtime) -> None:
    """A form-encoded body is refused even if it spells the right fields."""
    result = api(
        "POST",
        "/streams",
        raw_body=f"id=s1&ws_url={URL}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (result.status, result.error["code"]) == (415, "unsupported_media_type")
    assert table_items(control_plane) == []


def test_empty_body_with_a_non_json_content_type_is_415(api: Api) -> None:
    """No body but a text/plain content type: still the wrong media type, not a crash."""
    result = api("POST", "/streams", headers={"Content-Type": "text/plain"})
    assert (result.status, result.error["field"]) == (415, "body")


def test_json_content_type_with_charset_is_accepted(api: Api) -> None:
    """application/json with parameters is JSON."""
    result = api(
        "POST",
        "/streams",
        body={"id": "s1", "ws_url": URL},
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert result.status == 201


def test_base64_body_is_decoded(api: Api) -> None:
    """API Gateway may pass the body base64-encoded; it is read the same."""
    result = api("POST", "/streams", body={"id": "s1", "ws_url": URL}, base64_body=True)
    assert result.status == 201


def test_broken_base64_body_is_400(api: Api) -> None:
    """A body flagged base64 that is not base64 is a client error naming the body."""
    event = api_event("POST", "/streams", raw_body="%%%not-base64%%%")
    event["isBase64Encoded"] = True
    response = handler(event, LambdaContext())
    assert response["statusCode"] == 400
    assert json.loads(response["body"])["error"]["field"] == "body"


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "words"),
    [
        ("POST", "/streams", {"id": "-x", "ws_url": URL}, "id", "1 to 128 characters"),
        ("GET", "/streams/-x", None, "id", "starting with a letter or a digit"),
        ("POST", "/streams", {"id": "s1", "ws_url": "https://a.example/"}, "ws_url", "wss://"),
        ("POST", "/streams", {"id": "s1", "ws_url": "wss://a b/"}, "ws_url", "without spaces"),
    ],
)
def test_rules_are_said_in_words_not_as_regular_expressions(
    api: Api, method: str, path: str, body: Any, field: str, words: str
) -> None:
    """A malformed id or URL is told what the rule is, never shown the raw pattern."""
    result = api(method, path, body=body)
    assert (result.status, result.error["field"]) == (400, field)
    assert words in result.error["message"]
    assert "^" not in result.error["message"] and "pattern" not in result.error["message"]


@pytest.mark.parametrize("path", ["/streams/-x", "/streams/a%20b", "/streams/" + "x" * 129])
def test_invalid_id_in_the_path_is_400(api: Api, path: str) -> None:
    """Path ids follow the same rule as body ids."""
    result = api("GET", path)
    assert (result.status, result.error["field"]) == (400, "id")


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/nothing"), ("PUT", "/streams"), ("PUT", "/streams/s1"), ("GET", "/")],
)
def test_unknown_route_is_404(api: Api, method: str, path: str) -> None:
    """Routes outside architecture §6 are a JSON 404."""
    result = api(method, path)
    assert (result.status, result.error["code"]) == (404, "route_not_found")


def test_allow_list_setting_is_enforced(allow_listed: runtime.Runtime) -> None:
    """With allowed_hosts set, a host off the list is refused naming ws_url."""
    api = Api()
    assert api("POST", "/streams", body={"id": "a", "ws_url": URL}).status == 201
    result = api("POST", "/streams", body={"id": "b", "ws_url": "wss://feed.example.org/"})
    assert (result.status, result.error["field"]) == (400, "ws_url")


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("ws://127.0.0.1:8765/s1?rate=5", 201),
        ("ws://localhost:8765/s1", 201),
        ("ws://[::1]:8765/s1", 201),
        ("ws://169.254.169.254/", 400),
        ("ws://169.254.170.2/v2/credentials", 400),
        ("ws://[fd00:ec2::254]/", 400),
        ("ws://[fe80::1]/", 400),
        ("ws://10.0.0.1/", 400),
        ("ws://u:p@127.0.0.1:8765/", 400),
    ],
)
def test_local_mode_allows_loopback_but_never_metadata(
    local_mode: runtime.Runtime, url: str, status: int
) -> None:
    """The local stack may use ws:// and loopback; link-local and metadata stay refused."""
    result = Api()("POST", "/streams", body={"id": "s1", "ws_url": url})
    assert result.status == status, result.body
    if status == 400:
        assert result.error["field"] == "ws_url"


def test_rejection_does_not_echo_the_query_string(api: Api) -> None:
    """Query strings can carry secrets: a refused URL's message does not repeat them."""
    result = api("POST", "/streams", body={"id": "s1", "ws_url": "ws://x.example.com/?key=s3cr3t"})
    assert result.status == 400
    assert "s3cr3t" not in json.dumps(result.body)
