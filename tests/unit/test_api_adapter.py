"""The local API adapter builds the REST proxy event API Gateway would send, and serves it."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from local.api_adapter import ApiAdapter, make_server
from local.gateway_events import (
    LOCAL_IDENTITY,
    HttpRequest,
    Resource,
    build_event,
    find_resource,
    load_resources,
    response_from_proxy,
)

RESOURCES = [
    Resource("/streams", frozenset({"GET", "POST"})),
    Resource("/streams/{id}", frozenset({"GET", "DELETE"})),
    Resource("/streams/{id}/stop", frozenset({"POST"})),
    Resource("/streams/{id}/start", frozenset({"POST"})),
    Resource("/workers", frozenset({"GET"})),
]


def request(method: str = "GET", target: str = "/streams", **kwargs: Any) -> HttpRequest:
    values: dict[str, Any] = {
        "headers": [("Host", "127.0.0.1:8080"), ("User-Agent", "test/1")],
        "body": b"",
        "source_ip": "127.0.0.1",
        "host": "127.0.0.1:8080",
        "port": 8080,
        "received_at_ms": 1_767_225_600_123,
        "request_id": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
    }
    values.update(kwargs)
    return HttpRequest(method=method, target=target, **values)


def event_for(req: HttpRequest) -> dict[str, Any]:
    found = find_resource(RESOURCES, req.method, req.target.split("?")[0])
    assert found is not None
    return build_event(req, *found, stage="local")


# --- resources -------------------------------------------------------------------------------


def test_resources_come_from_the_openapi_document() -> None:
    """Every route of the API is a resource of the adapter, with its methods."""
    by_path = {r.template: r.methods for r in load_resources()}
    assert by_path["/streams"] >= {"GET", "POST"}
    assert by_path["/streams/{id}"] >= {"GET", "DELETE"}
    assert by_path["/streams/{id}/stop"] == {"POST"}
    assert by_path["/streams/{id}/start"] == {"POST"}
    assert by_path["/workers"] == {"GET"}


def test_literal_segments_win_over_parameters() -> None:
    """``/streams/{id}/stop`` matches the stop resource with id decoded from the path."""
    found = find_resource(RESOURCES, "POST", "/streams/a%20b/stop")
    assert found is not None
    resource, parameters = found
    assert resource.template == "/streams/{id}/stop"
    assert parameters == {"id": "a b"}


@pytest.mark.parametrize(
    ("method", "path"), [("PUT", "/streams"), ("GET", "/nope"), ("GET", "/streams//stop")]
)
def test_unknown_routes_match_nothing(method: str, path: str) -> None:
    """A method or path the API does not define has no resource."""
    assert find_resource(RESOURCES, method, path) is None


# --- the event -------------------------------------------------------------------------------


def test_path_stays_encoded_and_path_parameters_are_decoded() -> None:
    """As in REST APIs: ``path`` is the path as sent, ``pathParameters`` are decoded."""
    event = event_for(request("GET", "/streams/a%20b"))
    assert event["path"] == "/streams/a%20b"
    assert event["pathParameters"] == {"id": "a b"}


def test_event_names_resource_path_and_stage() -> None:
    """resource, path, httpMethod and requestContext name the matched resource and stage."""
    event = event_for(request("GET", "/streams/s1"))
    assert event["resource"] == "/streams/{id}"
    assert event["path"] == "/streams/s1"
    assert event["httpMethod"] == "GET"
    assert event["pathParameters"] == {"id": "s1"}
    assert event["stageVariables"] is None
    context = event["requestContext"]
    assert context["resourcePath"] == "/streams/{id}"
    assert context["httpMethod"] == "GET"
    assert context["stage"] == "local"
    assert context["requestId"] == "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    assert context["requestTimeEpoch"] == 1_767_225_600_123
    assert context["requestTime"] == "01/Jan/2026:00:00:00 +0000"
    assert context["accountId"] == "000000000000"


def test_query_has_single_and_multi_value_forms() -> None:
    """Repeated keys keep every value in the multi map and the last one in the single map."""
    event = event_for(request("GET", "/streams?state=STARTED&tag=a&tag=b%20c&empty="))
    assert event["queryStringParameters"] == {"state": "STARTED", "tag": "b c", "empty": ""}
    assert event["multiValueQueryStringParameters"] == {
        "state": ["STARTED"],
        "tag": ["a", "b c"],
        "empty": [""],
    }


def test_no_query_means_null_query_maps() -> None:
    """Without a query string both query maps are null, as API Gateway sends them."""
    event = event_for(request("GET", "/workers"))
    assert event["queryStringParameters"] is None
    assert event["multiValueQueryStringParameters"] is None
    assert event["pathParameters"] is None


def test_headers_have_single_and_multi_value_forms() -> None:
    """Header names keep their case; repeated headers are all in multiValueHeaders."""
    headers = [("Host", "h"), ("X-Tag", "one"), ("X-Tag", "two"), ("User-Agent", "ua/1")]
    event = event_for(request(headers=headers))
    assert event["headers"]["X-Tag"] == "two"
    assert event["multiValueHeaders"]["X-Tag"] == ["one", "two"]
    assert event["headers"]["X-Forwarded-For"] == "127.0.0.1"
    assert event["headers"]["X-Forwarded-Proto"] == "http"
    assert event["headers"]["X-Forwarded-Port"] == "8080"


def test_text_body_is_passed_as_is() -> None:
    """A UTF-8 body is a string with isBase64Encoded false; no body is null."""
    event = event_for(request("POST", "/streams", body='{"id":"é"}'.encode()))
    assert event["body"] == '{"id":"é"}'
    assert event["isBase64Encoded"] is False
    empty = event_for(request("POST", "/streams/s1/stop"))
    assert empty["body"] is None
    assert empty["isBase64Encoded"] is False


def test_binary_body_is_base64() -> None:
    """A body that is not UTF-8 is base64 with isBase64Encoded true."""
    event = event_for(request("POST", "/streams", body=b"\xff\x00\xfe"))
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\xff\x00\xfe"


def test_identity_is_a_fake_iam_caller() -> None:
    """The identity names an IAM user, the client address and its user agent."""
    identity = event_for(request())["requestContext"]["identity"]
    assert identity["userArn"] == LOCAL_IDENTITY["userArn"]
    assert identity["accountId"] == "000000000000"
    assert identity["sourceIp"] == "127.0.0.1"
    assert identity["userAgent"] == "test/1"
    assert identity["cognitoIdentityId"] is None


def test_powertools_resolver_reads_the_event() -> None:
    """A Powertools REST resolver routes the event and sees its params, query, body, identity."""
    app = APIGatewayRestResolver()
    seen: dict[str, Any] = {}

    @app.post("/streams/<stream_id>/stop")
    def stop(stream_id: str) -> dict[str, Any]:
        event = app.current_event
        seen.update(
            stream_id=stream_id,
            query=event.multi_value_query_string_parameters,
            single=event.get_query_string_value("x"),
            body=event.json_body,
            user=event.request_context.identity.user_arn,
            stage=event.request_context.stage,
            header=event.headers.get("x-tag"),
        )
        return {"ok": True}

    req = request(
        "POST",
        "/streams/s-1/stop?x=1&x=2",
        headers=[("Host", "h"), ("X-Tag", "t"), ("Content-Type", "application/json")],
        body=b'{"why": "test"}',
    )
    response = app.resolve(event_for(req), None)
    assert response["statusCode"] == 200
    assert seen == {
        "stream_id": "s-1",
        "query": {"x": ["1", "2"]},
        "single": "2",
        "body": {"why": "test"},
        "user": LOCAL_IDENTITY["userArn"],
        "stage": "local",
        "header": "t",
    }


# --- responses -------------------------------------------------------------------------------


def test_proxy_response_headers_and_base64_body() -> None:
    """Single and multi-value headers are sent; a base64 body is decoded."""
    response = response_from_proxy(
        {
            "statusCode": 201,
            "headers": {"Content-Type": "application/json", "X-One": "1"},
            "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"], "X-One": ["1"]},
            "body": base64.b64encode(b"\x00\x01").decode(),
            "isBase64Encoded": True,
        }
    )
    assert response.status == 201
    assert sorted(response.headers) == [
        ("Content-Type", "application/json"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
        ("X-One", "1"),
    ]
    assert response.body == b"\x00\x01"


@pytest.mark.parametrize(
    "result", [None, {}, {"statusCode": "200"}, {"statusCode": 200, "body": 5}]
)
def test_malformed_proxy_output_is_502(result: Any) -> None:
    """A function answer without an integer statusCode is API Gateway's 502."""
    assert response_from_proxy(result).status == 502


# --- a running adapter -----------------------------------------------------------------------


class Recorder:
    """A handler that records events and answers what it is told."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.contexts: list[Any] = []
        self.answer: Any = {"statusCode": 200, "headers": {}, "body": "{}"}
        self.fail = False

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        self.events.append(event)
        self.contexts.append(context)
        if self.fail:
            raise RuntimeError("boom")
        return self.answer


@pytest.fixture
def served() -> Iterator[tuple[Recorder, int]]:
    recorder = Recorder()
    server = make_server(ApiAdapter(recorder, RESOURCES, stage="local"), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield recorder, server.server_port
    server.shutdown()
    server.server_close()


def call(
    port: int,
    method: str,
    target: str,
    body: bytes | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.putrequest(method, target)
    for name, value in headers or []:
        connection.putheader(name, value)
    if body is not None:
        connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    response.read()
    return response


def test_running_adapter_delivers_the_event(served: tuple[Recorder, int]) -> None:
    """A real HTTP request reaches the handler as a proxy event with every part in place."""
    recorder, port = served
    recorder.answer = {
        "statusCode": 201,
        "headers": {"Content-Type": "application/json"},
        "body": '{"id": "s1"}',
        "isBase64Encoded": False,
    }
    headers = [("X-Tag", "a"), ("X-Tag", "b"), ("Content-Type", "application/json")]
    response = call(port, "POST", "/streams?dry=1&dry=2", b'{"id":"s1"}', headers)
    assert response.status == 201
    assert response.getheader("Content-Type") == "application/json"
    event = recorder.events[0]
    assert event["resource"] == "/streams"
    assert event["requestContext"]["resourcePath"] == "/streams"
    assert event["requestContext"]["httpMethod"] == "POST"
    assert event["multiValueQueryStringParameters"] == {"dry": ["1", "2"]}
    assert event["multiValueHeaders"]["X-Tag"] == ["a", "b"]
    assert event["body"] == '{"id":"s1"}'
    assert event["requestContext"]["identity"]["sourceIp"] == "127.0.0.1"
    assert recorder.contexts[0].aws_request_id == event["requestContext"]["requestId"]
    assert recorder.contexts[0].get_remaining_time_in_millis() > 0


def test_unknown_route_is_403_without_calling_the_function(served: tuple[Recorder, int]) -> None:
    """Like API Gateway, an undefined route answers Missing Authentication Token."""
    recorder, port = served
    response = call(port, "GET", "/nowhere")
    assert response.status == 403
    assert recorder.events == []


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "PROPFIND", "BREW"])
def test_any_other_method_is_api_gateways_json_403(
    served: tuple[Recorder, int], method: str
) -> None:
    """Methods no route has get the JSON 403 API Gateway gives, not http.server's 501 page."""
    recorder, port = served
    target = "feed.example.com:443" if method == "CONNECT" else "/streams"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.putrequest(method, target, skip_host=True)
    connection.putheader("Host", f"127.0.0.1:{port}")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 403
    assert response.getheader("Content-Type") == "application/json"
    assert json.loads(response.read())["message"] == "Missing Authentication Token"
    assert recorder.events == []


def test_a_malformed_request_line_is_a_json_400(served: tuple[Recorder, int]) -> None:
    """Even a request HTTP cannot parse is answered in JSON, without echoing it."""
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /streams HTTP/1.1 <script>\r\n\r\n")
        raw = b""
        while chunk := sock.recv(4096):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"Content-Type: application/json" in head
    assert json.loads(body) == {"message": "Bad Request"}


def test_failing_function_is_502(served: tuple[Recorder, int]) -> None:
    """An exception in the function is a 502 Internal server error, and the server lives on."""
    recorder, port = served
    recorder.fail = True
    assert call(port, "GET", "/workers").status == 502
    recorder.fail = False
    assert call(port, "GET", "/workers").status == 200


def test_oversized_body_is_413(served: tuple[Recorder, int]) -> None:
    """A declared body above API Gateway's 10 MB limit is refused before it is read."""
    recorder, port = served
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.putrequest("POST", "/streams")
    connection.putheader("Content-Length", str(11 * 1024 * 1024))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413
    assert json.loads(response.read()) == {"message": "Request Too Long"}
    assert recorder.events == []


def test_an_unknown_route_says_which_routes_there_are(served: tuple[Recorder, int]) -> None:
    """Locally API Gateway's 403 comes with a hint: the route asked for and the routes there
    are, so a wrong base path (``--api http://127.0.0.1:8080/v1``) is found at once."""
    _, port = served
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("GET", "/v1/streams")
    response = connection.getresponse()
    assert response.status == 403
    body = json.loads(response.read())
    assert body["message"] == "Missing Authentication Token"
    assert "no route for GET /v1/streams" in body["hint"]
    assert "GET /streams" in body["routes"] and "DELETE /streams/{id}" in body["routes"]


def test_a_client_hanging_up_leaves_one_line_and_no_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A client gone before its answer is written (Ctrl-C in ``watch``): the log says so in
    its one line per request, with no traceback, and the server goes on."""
    released = threading.Event()

    def slow(event: dict[str, Any], context: Any) -> Any:
        released.wait(5)
        return {"statusCode": 200, "headers": {}, "body": "x" * 1_000_000}

    server = make_server(ApiAdapter(slow, RESOURCES, stage="local"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        sock = socket.create_connection(("127.0.0.1", server.server_port), timeout=5)
        sock.sendall(b"GET /workers HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # a reset: the answer meets a closed connection
        released.set()
        assert call(server.server_port, "GET", "/workers").status == 200
    finally:
        server.shutdown()
        server.server_close()
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "GET /workers 200" in err and "(client hung up)" in err
