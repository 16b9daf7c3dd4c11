"""The API's OpenAPI document, generated from the routes; ``make openapi`` writes it.

Run ``python -m lambdas.openapi_document [PATH]`` (default ``lambdas/openapi.json``). A test
fails when the committed file differs from what the routes generate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn

from lambdas.api import app

DEFAULT_PATH: Final = Path(__file__).with_name("openapi.json")
TITLE: Final = "streamlease"
API_VERSION: Final = "1"
DESCRIPTION: Final = (
    "Control plane of streamlease: start, stop and inspect long-lived upstream WebSocket "
    "streams and the worker fleet that holds them. Requests are signed with AWS SigV4 (IAM). "
    'Every error is {"error": {"code", "message", "field"}}; validation errors are 400.'
)


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document as a dict.

    The 422 answers Powertools documents for validation are removed, with the schemas only they
    used: this API maps every validation error to 400 with its own error body
    (see :mod:`lambdas.http_errors`). A response a route declares with empty ``content`` has
    no body and is documented without one (Powertools would otherwise document the handler's
    return type as a JSON body).
    """
    schema: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(
            title=TITLE,
            version=API_VERSION,
            description=DESCRIPTION,
            security_schemes={
                "sigv4": APIKey.model_validate(
                    {
                        "type": "apiKey",
                        "name": "Authorization",
                        "in": APIKeyIn.header,
                        "description": "AWS Signature Version 4 (IAM authorization).",
                    }
                )
            },
            security=[{"sigv4": []}],
        )
    )
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            responses.pop("422", None)
            for response in responses.values():
                if response.get("content") == {}:
                    del response["content"]  # a route's way of saying "no body" (204)
    components = schema.get("components", {}).get("schemas", {})
    used = _referenced(schema.get("paths", {}), components)
    for name in [n for n in components if n not in used]:
        del components[name]
    return schema


def _referenced(root: Any, components: dict[str, Any]) -> set[str]:
    """Names of the component schemas reachable from ``root`` through ``$ref``s."""
    prefix = "#/components/schemas/"
    found: set[str] = set()
    pending = [root]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(prefix):
                name = ref[len(prefix) :]
                if name not in found and name in components:
                    found.add(name)
                    pending.append(components[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found


def render() -> str:
    """The document as the committed file's text."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the document to ``argv[1]`` (default :data:`DEFAULT_PATH`)."""
    path = Path(argv[1]) if len(argv) > 1 else DEFAULT_PATH
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
