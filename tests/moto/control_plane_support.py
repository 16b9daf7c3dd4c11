"""Helpers for the control-plane handler tests: stored events, an API caller, the queue."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from local.lambda_context import LambdaContext
from streamlease import aws
from streamlease.commands import Command
from streamlease.settings import Settings
from streamlease.telemetry import TRACE_MESSAGE_ATTRIBUTE

EVENTS = Path(__file__).resolve().parent.parent / "events"
OPERATOR_ARN = "arn:aws:iam::123456789012:user/operator"


def load_event(name: str) -> dict[str, Any]:
    """The stored event ``tests/events/<name>.json``."""
    event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    return event


@dataclasses.dataclass(frozen=True)
class ApiResult:
    """A proxy response, decoded."""

    status: int
    body: Any
    headers: dict[str, Any]

    @property
    def error(self) -> dict[str, Any]:
        """The ``error`` object of an error answer."""
        assert isinstance(self.body, dict) and "error" in self.body, self.body
        error: dict[str, Any] = self.body["error"]
        return error


def api_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    raw_body: str | None = None,
    query: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    identity: Mapping[str, Any] | None = None,
    base64_body: bool = False,
) -> dict[str, Any]:
    """The stored REST proxy event with method, path, body, query and identity replaced."""
    event = copy.deepcopy(load_event("api_rest_create_stream"))
    event["httpMethod"] = method
    event["path"] = path
    event["requestContext"]["httpMethod"] = method
    event["requestContext"]["path"] = "/prod" + path
    text = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    if text is not None and base64_body:
        text = base64.b64encode(text.encode()).decode()
    event["body"] = text
    event["isBase64Encoded"] = base64_body
    event["queryStringParameters"] = dict(query) if query else None
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
    if headers is not None:
        event["headers"] = dict(headers)
        event["multiValueHeaders"] = {k: [v] for k, v in headers.items()}
    if identity is not None:
        event["requestContext"]["identity"] = dict(identity)
    return event


class Api:
    """Calls the API handler in-process, as API Gateway would."""

    def __call__(self, method: str, path: str, **kwargs: Any) -> ApiResult:
        """Send one request (see :func:`api_event` for the keywords)."""
        from lambdas.api import handler

        response = handler(api_event(method, path, **kwargs), LambdaContext())
        text = response.get("body") or ""
        headers = {k: v for k, v in (response.get("multiValueHeaders") or {}).items()}
        headers.update(response.get("headers") or {})
        return ApiResult(
            status=int(response["statusCode"]),
            body=json.loads(text) if text else None,
            headers=headers,
        )


class CommandQueue:
    """The command queue, read the way a test inspects it."""

    def __init__(self, settings: Settings) -> None:
        self._sqs = aws.client("sqs", settings)
        self._url = settings.queue_url

    def drain(self) -> list[Command]:
        """Every command now in the queue (deleted as read), in no particular order."""
        return [command for command, _ in self.drain_traced()]

    def drain_traced(self) -> list[tuple[Command, str | None]]:
        """Every command now in the queue with the trace header it carries (deleted as read)."""
        found: list[tuple[Command, str | None]] = []
        while True:
            response = self._sqs.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=[TRACE_MESSAGE_ATTRIBUTE],
            )
            messages = response.get("Messages", [])
            if not messages:
                return found
            for message in messages:
                trace = message.get("Attributes", {}).get(TRACE_MESSAGE_ATTRIBUTE)
                found.append((Command.from_json(message["Body"]), trace))
                self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=message["ReceiptHandle"])
