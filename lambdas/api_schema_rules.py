"""The rules of the request bodies that pydantic's field types do not carry into the OpenAPI
document: mutually exclusive fields, a body that needs one of two fields, name and value
patterns, credential names. Each is written from the same constants the server checks with
(:mod:`streamlease.profile_fields`, :mod:`streamlease.templates`), so the document refuses
what the server refuses; ``tests/moto/test_api_document_rules.py`` holds both to one table.

Left out, as no JSON Schema says them: which hosts the URL policy allows, a query parameter
name hidden by percent-encoding, header names repeated in another case, whether resume by
header or open message has a value carrying the resume point, and a page token's validity.
JSON Schema patterns have no case-insensitive flag, so names are matched letter by letter.
"""

from __future__ import annotations

import re
from typing import Any, Final

from streamlease.profile import RESUME_NONE, RESUME_QUERY
from streamlease.profile_fields import (
    HTTP_NAME_PATTERN,
    MAX_HEADER_VALUE_CHARS,
    MAX_QUERY_PARAMS,
    MAX_SEQ_PATH_PARTS,
    PATH_PART_CHARS,
    QUERY_VALUE_PATTERN,
    RESERVED_HEADERS,
    SEQ_NONE,
)
from streamlease.templates import SENSITIVE_WORDS


def any_case(word: str) -> str:
    """A pattern matching ``word`` in any letter case: ``Host`` → ``[Hh][Oo][Ss][Tt]``."""
    return "".join(
        f"[{c.upper()}{c.lower()}]" if c.isalpha() else (c if c in "_-" else re.escape(c))
        for c in word
    )


CREDENTIAL_NAME: Final = "|".join(any_case(word) for word in SENSITIVE_WORDS)
"""A name that says its value is a credential (a part of it, in any case)."""

SEQ_PATTERN: Final = (
    f"^(?:{SEQ_NONE}|{PATH_PART_CHARS}(?:\\.{PATH_PART_CHARS}){{0,{MAX_SEQ_PATH_PARTS - 1}}})$"
)
_ONE_LINE: Final = "^[^\\r\\n\\u0000]*$"
_NULL: Final = {"type": "null"}


def _set(schema: dict[str, Any], field: str, **rules: Any) -> None:
    schema["properties"][field].update(rules)


def profile_rules(schema: dict[str, Any]) -> None:
    """``StreamProfile``: the field rules and the rules across fields (a field given as null
    is as good as left out, as the server reads it)."""
    _set(
        schema,
        "query",
        minProperties=1,
        maxProperties=MAX_QUERY_PARAMS,
        propertyNames={"pattern": HTTP_NAME_PATTERN, "not": {"pattern": CREDENTIAL_NAME}},
        additionalProperties={"type": "string", "pattern": QUERY_VALUE_PATTERN},
    )
    reserved = "|".join(any_case(name) for name in sorted(RESERVED_HEADERS))
    _set(
        schema,
        "headers",
        propertyNames={"pattern": HTTP_NAME_PATTERN, "not": {"pattern": f"^(?:{reserved})$"}},
        additionalProperties={
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_HEADER_VALUE_CHARS,
            "pattern": _ONE_LINE,
        },
    )
    _set(
        schema,
        "subprotocols",
        uniqueItems=True,
        items={"type": "string", "pattern": HTTP_NAME_PATTERN},
    )
    _set(schema, "seq", pattern=SEQ_PATTERN)
    _set(schema, "resume_param", pattern=HTTP_NAME_PATTERN)
    schema["allOf"] = [
        {
            "description": "open_message or open_messages, not both",
            "not": {
                "required": ["open_message", "open_messages"],
                "properties": {
                    "open_message": {"type": "string"},
                    "open_messages": {"type": "array"},
                },
            },
        },
        {
            "description": "with seq none there is nothing to resume from: resume none or "
            "left out, no resume_param",
            "if": {"required": ["seq"], "properties": {"seq": {"const": SEQ_NONE}}},
            "then": {
                "properties": {
                    "resume": {"enum": [RESUME_NONE, None]},
                    "resume_param": _NULL,
                }
            },
        },
        {
            "description": "resume_param only for resume by query",
            "if": {
                "required": ["resume_param"],
                "properties": {"resume_param": {"type": "string"}},
            },
            "then": {"properties": {"resume": {"enum": [RESUME_QUERY, None]}}},
        },
    ]


def create_rules(schema: dict[str, Any]) -> None:
    """``CreateStream``: no credential named in the URL's own query."""
    _set(schema, "ws_url", **{"not": {"pattern": _credential_in_query()}})


def change_rules(schema: dict[str, Any]) -> None:
    """``ChangeStream``: ws_url, profile or both; the URL as on create."""
    _set(schema, "ws_url", **{"not": {"pattern": _credential_in_query()}})
    schema["anyOf"] = [
        {"required": ["ws_url"], "properties": {"ws_url": {"type": "string"}}},
        {"required": ["profile"], "properties": {"profile": {"type": "object"}}},
    ]


def _credential_in_query() -> str:
    return f"[?&][^=&#]*(?:{CREDENTIAL_NAME})"
