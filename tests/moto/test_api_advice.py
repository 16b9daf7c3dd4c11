"""What a refusal tells an operator to do names the command that does it now."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from control_plane_support import Api

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
from named_commands import command_problem, named_commands

URL = "wss://feed.example.com/v1"
OPERATING = Path(__file__).resolve().parents[2] / "docs" / "operating.md"


def test_start_with_another_url_points_to_set_not_to_delete(api: Api) -> None:
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    result = api("POST", "/streams", body={"id": "s1", "ws_url": URL + "/other"})
    assert (result.status, result.error["field"]) == (409, "ws_url")
    assert "streamlease set s1 --url" in result.error["message"]
    assert "PATCH /streams/s1" in result.error["message"]
    assert "delete" not in result.error["message"]


def test_start_with_another_profile_points_to_set(api: Api) -> None:
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    body = {"id": "s1", "ws_url": URL, "profile": {"seq": "data.u"}}
    result = api("POST", "/streams", body=body)
    assert (result.status, result.error["field"]) == (409, "profile")
    assert "streamlease set s1" in result.error["message"]
    assert "delete" not in result.error["message"]


def test_deleting_a_started_stream_names_the_commands_that_do_it(api: Api) -> None:
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201
    result = api("DELETE", "/streams/s1")
    assert result.status == 409
    assert "streamlease stop s1" in result.error["message"]
    assert "rm --wait s1" in result.error["message"]


def test_a_change_in_place_is_accepted_and_the_same_change_again_is_not_one(api: Api) -> None:
    """202 and generation + 1 for a change (as stop's), 200 and the same generation for none."""
    created = api("POST", "/streams", body={"id": "s1", "ws_url": URL})
    changed = api("PATCH", "/streams/s1", body={"ws_url": URL + "/2"})
    again = api("PATCH", "/streams/s1", body={"ws_url": URL + "/2"})
    assert (changed.status, changed.body["generation"]) == (202, created.body["generation"] + 1)
    assert (again.status, again.body["generation"]) == (200, changed.body["generation"])


def test_the_operating_pages_malformed_row_fixes_the_profile_in_place() -> None:
    lines = OPERATING.read_text().splitlines()
    row = next(line for line in lines if line.startswith("| `MALFORMED`"))
    assert "streamlease set ID --seq-path" in row
    assert "delete" not in row


def test_every_command_an_answer_names_is_one_the_cli_has(api: Api) -> None:
    """The 409s of start and delete and the missing-secret warning name commands the CLI
    takes as written (``streamlease secret put NAME``, not a command that does not exist)."""
    secret = f"streamlease/{uuid.uuid4().hex}"
    profile = {"headers": {"Authorization": f"Bearer {{secret:{secret}#token}}"}}
    created = api("POST", "/streams", body={"id": "s1", "ws_url": URL, "profile": profile})
    texts = [*created.body["warnings"]]
    for body in ({"id": "s1", "ws_url": URL + "/other"}, {"id": "s1", "ws_url": URL}):
        texts.append(api("POST", "/streams", body={**body, "profile": {}}).error["message"])
    texts.append(api("DELETE", "/streams/s1").error["message"])
    named = [command for text in texts for command in named_commands(text)]
    assert len(named) >= len(texts)
    assert [p for c in named if (p := command_problem(c)) is not None] == []
