"""Input accepted today and failing later is refused at once: credentials in a URL's own query,
fields a route does not take."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from control_plane_support import Api
from stream_items import put_stream, set_attributes

from lambdas import runtime
from lambdas.openapi_document import document
from streamlease.schema import StreamAttr

URL = "wss://feed.example.com/v1"
SECRET_URL = "wss://feed.example.com/v1?channel=btc&token=abc123&password=hunter2"


def test_a_credential_in_the_urls_own_query_is_refused_like_one_in_profile_query(
    api: Api, control_plane: runtime.Runtime
) -> None:
    """``?token=…`` in ws_url: the same rule, and the same words, as ``profile.query.token``."""
    in_url = api("POST", "/streams", body={"id": "s1", "ws_url": SECRET_URL})
    in_profile = api(
        "POST", "/streams", body={"id": "s1", "ws_url": URL, "profile": {"query": {"token": "x"}}}
    )
    assert (in_url.status, in_url.error["field"]) == (400, "ws_url")
    assert in_profile.status == 400
    assert "token" in in_url.error["message"]
    assert in_profile.error["message"] in in_url.error["message"]
    assert "abc123" not in json.dumps(in_url.body)
    assert api("GET", "/streams/s1").status == 404


@pytest.mark.parametrize("name", ["token", "Password", "api_key", "x-auth-token", "%74oken"])
def test_every_credential_name_is_refused_in_the_url_whatever_its_spelling(
    api: Api, name: str
) -> None:
    """Names are judged as the profile judges them, percent-decoded and in any case."""
    result = api("POST", "/streams", body={"id": "s1", "ws_url": f"{URL}?{name}=v"})
    assert (result.status, result.error["field"]) == (400, "ws_url")


def test_changing_to_a_url_with_a_credential_is_refused(api: Api) -> None:
    """PATCH follows the create rule."""
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    result = api("PATCH", "/streams/s1", body={"ws_url": SECRET_URL})
    assert (result.status, result.error["field"]) == (400, "ws_url")


def test_a_url_with_ordinary_parameters_is_accepted_whole(api: Api) -> None:
    result = api("POST", "/streams", body={"id": "s1", "ws_url": f"{URL}?channel=btc&depth=5"})
    assert result.status == 201
    assert result.body["ws_url"] == f"{URL}?channel=btc&depth=5"


def test_a_url_stored_before_the_rule_is_masked_in_every_answer(
    api: Api, control_plane: runtime.Runtime
) -> None:
    """GET, list and the answers of stop, start and a change show the credential's value as
    ***, the other parameters as stored."""
    table = control_plane.settings.table_name
    put_stream(control_plane.dynamodb, table, "old")
    set_attributes(control_plane.dynamodb, table, "old", {StreamAttr.WS_URL: SECRET_URL})
    shown = [api("GET", "/streams/old").body["ws_url"]]
    shown += [s["ws_url"] for s in api("GET", "/streams").body["streams"]]
    shown.append(api("POST", "/streams/old/stop").body["ws_url"])
    shown.append(api("POST", "/streams/old/start").body["ws_url"])
    shown.append(api("PATCH", "/streams/old", body={"profile": {"seq": "data.u"}}).body["ws_url"])
    for url in shown:
        assert url == "wss://feed.example.com/v1?channel=btc&token=***&password=***"


def _routes() -> list[tuple[str, str]]:
    return [
        (method.upper(), path.replace("{id}", "s1"))
        for path, item in document()["paths"].items()
        for method in item
    ]


@pytest.mark.parametrize(("method", "path"), _routes())
def test_an_unknown_body_field_is_400_on_every_route(api: Api, method: str, path: str) -> None:
    """Every route of the document, with or without a body of its own, names the field."""
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    body: dict[str, Any] = {"bogus": 1}
    if (method, path) == ("POST", "/streams"):
        body |= {"id": "s2", "ws_url": URL}
    if method == "PATCH":
        body |= {"ws_url": URL}
    result = api(method, path, body=body)
    assert (result.status, result.error["field"]) == (400, "bogus"), result.body


@pytest.mark.parametrize("raw", ["", "{}"])
def test_stop_with_no_body_or_an_empty_object_is_accepted(api: Api, raw: str) -> None:
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    assert api("POST", "/streams/s1/stop", raw_body=raw).status == 202


def test_a_body_that_is_not_an_object_is_refused_where_no_body_is_taken(api: Api) -> None:
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    result = api("POST", "/streams/s1/stop", body=[1])
    assert (result.status, result.error["field"]) == (400, "body")


def secret_profile(name: str) -> dict[str, Any]:
    return {"headers": {"Authorization": f"Bearer {{secret:{name}#token}}"}}


def test_a_secret_that_does_not_exist_is_named_in_the_answer_not_refused(
    api: Api, control_plane: runtime.Runtime
) -> None:
    """201 (the secret may come after the stream) with a warning naming it and the command
    that creates it; the warning is for the answer only, a later read does not carry it."""
    name = f"streamlease/{uuid.uuid4().hex}"
    result = api(
        "POST", "/streams", body={"id": "s1", "ws_url": URL, "profile": secret_profile(name)}
    )
    assert result.status == 201
    assert len(result.body["warnings"]) == 1
    assert (
        name in result.body["warnings"][0]
        and f"streamlease secret put {name}" in result.body["warnings"][0]
    )
    assert api("GET", "/streams/s1").body["warnings"] == []


def test_a_secret_that_exists_gives_no_warning(api: Api, control_plane: runtime.Runtime) -> None:
    name = f"streamlease/{uuid.uuid4().hex}"
    control_plane.secretsmanager.create_secret(Name=name, SecretString='{"token": "t"}')
    result = api(
        "POST", "/streams", body={"id": "s1", "ws_url": URL, "profile": secret_profile(name)}
    )
    assert (result.status, result.body["warnings"]) == (201, [])


def test_a_change_to_a_missing_secret_is_named_too(api: Api) -> None:
    name = f"streamlease/{uuid.uuid4().hex}"
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    result = api("PATCH", "/streams/s1", body={"profile": secret_profile(name)})
    assert result.status == 202
    assert [name in w for w in result.body["warnings"]] == [True]
