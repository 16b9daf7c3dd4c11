"""The committed OpenAPI document matches the routes (regenerate with ``make openapi``)."""

from __future__ import annotations

import json

from lambdas.openapi_document import DEFAULT_PATH, document, render
from streamlease.schema import STREAM_ID_PATTERN, STREAM_ID_RULE
from streamlease.url_policy import URL_PATTERN

ROUTES = {
    ("post", "/streams"),
    ("get", "/streams"),
    ("get", "/streams/{id}"),
    ("patch", "/streams/{id}"),
    ("delete", "/streams/{id}"),
    ("post", "/streams/{id}/stop"),
    ("post", "/streams/{id}/start"),
    ("get", "/workers"),
}


def test_committed_document_is_up_to_date() -> None:
    """lambdas/openapi.json equals what the routes generate; run `make openapi` if not."""
    assert DEFAULT_PATH.read_text(encoding="utf-8") == render(), "run `make openapi`"


def test_document_has_exactly_the_designed_routes() -> None:
    """The API is architecture §6, no more and no less."""
    paths = document()["paths"]
    assert {(m, p) for p, ops in paths.items() for m in ops} == ROUTES


def test_validation_errors_are_documented_as_400_only() -> None:
    """No operation documents Powertools' 422: validation failures are 400 with ErrorBody."""
    text = json.dumps(document())
    assert '"422"' not in text
    assert "HTTPValidationError" not in text
    create = document()["paths"]["/streams"]["post"]["responses"]
    assert create["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")


def test_create_body_forbids_unknown_fields() -> None:
    """The request schema says what the handler enforces: only id and ws_url."""
    schema = document()["components"]["schemas"]["CreateStream"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["id", "ws_url"]


def test_delete_is_documented_as_204_without_a_body() -> None:
    """DELETE answers 204 with no body, and the document says no body."""
    deleted = document()["paths"]["/streams/{id}"]["delete"]["responses"]["204"]
    assert "content" not in deleted


def test_no_success_without_a_body_documents_one() -> None:
    """Wherever a 204 is documented, it carries no content."""
    for operations in document()["paths"].values():
        for operation in operations.values():
            assert "content" not in operation["responses"].get("204", {})


def test_ws_url_has_the_url_pattern() -> None:
    """ws_url's schema carries the shape every accepted URL has."""
    ws_url = document()["components"]["schemas"]["CreateStream"]["properties"]["ws_url"]
    assert ws_url["pattern"] == URL_PATTERN
    assert "wss://" in ws_url["description"]


def test_stream_id_rule_is_said_in_words_next_to_its_pattern() -> None:
    """Body and path ids keep the pattern for machines and spell the rule out for people."""
    doc = document()
    body_id = doc["components"]["schemas"]["CreateStream"]["properties"]["id"]
    path_ids = [
        parameter["schema"]
        for operations in doc["paths"].values()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "id"
    ]
    assert path_ids
    for schema in (body_id, *path_ids):
        assert schema["pattern"] == STREAM_ID_PATTERN
        assert STREAM_ID_RULE in schema["description"]


def test_next_token_is_documented_as_opaque() -> None:
    """The query parameter and the response field both say the token is opaque."""
    doc = document()
    listing = doc["paths"]["/streams"]["get"]
    parameter = next(p for p in listing["parameters"] if p["name"] == "next_token")
    assert "opaque" in parameter["description"].lower()
    field = doc["components"]["schemas"]["StreamList"]["properties"]["next_token"]
    assert "opaque" in field["description"].lower()
