"""The OpenAPI document refuses exactly what the server refuses, for a table of requests: a
client generated from it cannot build a body that always fails (or be kept from one that works).
"""

from __future__ import annotations

from typing import Any

import pytest
from control_plane_support import Api
from jsonschema import Draft202012Validator

from lambdas.openapi_document import document

URL = "wss://feed.example.com/v1"
MESSAGE = '{"op":"subscribe"}'


def body_validator(path: str, method: str) -> Draft202012Validator:
    """A validator of ``method path``'s request body as the committed document states it."""
    doc = document()
    schema = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": doc["components"]})


def profile(**fields: Any) -> dict[str, Any]:
    return {"id": "s1", "ws_url": URL, "profile": fields}


CREATE_CASES = [
    ("open_message alone", profile(open_message=MESSAGE), True),
    ("open_messages alone", profile(open_messages=[MESSAGE]), True),
    ("both open fields", profile(open_message=MESSAGE, open_messages=[MESSAGE]), False),
    (
        "open_message null beside open_messages",
        profile(open_message=None, open_messages=[MESSAGE]),
        True,
    ),
    ("a query parameter", profile(query={"after": "{last_seq}"}), True),
    ("an empty query", profile(query={}), False),
    ("11 query parameters", profile(query={f"p{i}": "1" for i in range(11)}), False),
    ("a credential in the query", profile(query={"Session_Token": "x"}), False),
    ("a query value with a space", profile(query={"after": "a b"}), False),
    ("a query name that is no token", profile(query={"a b": "1"}), False),
    ("a header", profile(headers={"X-Client": "ops"}), True),
    ("a reserved header", profile(headers={"sec-websocket-key": "x"}), False),
    ("a header value of two lines", profile(headers={"X-Client": "a\r\nb"}), False),
    ("an empty header value", profile(headers={"X-Client": ""}), False),
    ("a header value too long", profile(headers={"X-Client": "x" * 1025}), False),
    ("a subprotocol", profile(subprotocols=["v1.json"]), True),
    ("a subprotocol twice", profile(subprotocols=["a", "a"]), False),
    ("a subprotocol with a space", profile(subprotocols=["a b"]), False),
    ("a seq path", profile(seq="data.u"), True),
    ("seq none", profile(seq="none"), True),
    ("a seq path with an empty name", profile(seq="data..u"), False),
    ("a seq path of 9 names", profile(seq=".".join("abcdefghi")), False),
    ("seq none, resume none", profile(seq="none", resume="none"), True),
    ("seq none, resume by query", profile(seq="none", resume="query"), False),
    ("seq none with resume_param", profile(seq="none", resume_param="from"), False),
    ("resume_param", profile(resume_param="from"), True),
    ("resume_param with resume by query", profile(resume="query", resume_param="from"), True),
    ("resume_param with resume none", profile(resume="none", resume_param="from"), False),
    ("resume_param that is no token", profile(resume_param="a b"), False),
    ("an unknown resume", profile(resume="sometimes"), False),
    ("idle_seconds 0", profile(idle_seconds=0), False),
    ("a URL with ordinary parameters", {"id": "s1", "ws_url": URL + "?channel=btc"}, True),
    ("a URL with a token", {"id": "s1", "ws_url": URL + "?channel=btc&token=abc"}, False),
    ("a URL with a password", {"id": "s1", "ws_url": URL + "?Password=abc"}, False),
]

CHANGE_CASES = [
    ("a URL", {"ws_url": URL + "/2"}, True),
    ("a profile", {"profile": {"seq": "data.u"}}, True),
    ("the default profile", {"profile": {}}, True),
    ("nothing", {}, False),
    ("both null", {"ws_url": None, "profile": None}, False),
    ("a URL with a credential", {"ws_url": URL + "?api_key=abc"}, False),
    ("both open fields", {"profile": {"open_message": MESSAGE, "open_messages": [MESSAGE]}}, False),
]


@pytest.mark.parametrize(
    ("case", "body", "accepted"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES]
)
def test_create_document_and_server_agree(
    api: Api, case: str, body: dict[str, Any], accepted: bool
) -> None:
    by_document = body_validator("/streams", "post").is_valid(body)
    result = api("POST", "/streams", body=body)
    assert result.status in ((200, 201) if accepted else (400,)), (case, result.body)
    assert by_document is accepted, case


@pytest.mark.parametrize(
    ("case", "body", "accepted"), CHANGE_CASES, ids=[c[0] for c in CHANGE_CASES]
)
def test_change_document_and_server_agree(
    api: Api, case: str, body: dict[str, Any], accepted: bool
) -> None:
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    by_document = body_validator("/streams/{id}", "patch").is_valid(body)
    result = api("PATCH", "/streams/s1", body=body)
    assert result.status in ((200, 202) if accepted else (400,)), (case, result.body)
    assert by_document is accepted, case


def parameter_validator(path: str, method: str, name: str) -> Draft202012Validator:
    """A validator of query parameter ``name`` of ``method path`` as the document states it."""
    doc = document()
    [parameter] = [p for p in doc["paths"][path][method]["parameters"] if p["name"] == name]
    return Draft202012Validator({**parameter["schema"], "components": doc["components"]})


@pytest.mark.parametrize(("limit", "accepted"), [(1, True), (100, True), (0, False), (101, False)])
def test_list_page_size_document_and_server_agree(api: Api, limit: int, accepted: bool) -> None:
    """The most a page holds is in the document, not only in the server's setting."""
    by_document = parameter_validator("/streams", "get", "limit").is_valid(limit)
    result = api("GET", "/streams", query={"limit": str(limit)})
    assert result.status == (200 if accepted else 400), result.body
    assert by_document is accepted
