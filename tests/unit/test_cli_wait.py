"""``--json`` has one shape for one stream or many; ``stop --wait`` and ``rm --wait`` wait for
the holder to let go; ``rm`` of a stream that is gone already is done."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cli_fake_api import Answer, FakeApi, Recorded, run, serve_fake_api


def stream(stream_id: str, state: str, owner: str | None = None) -> dict[str, Any]:
    return {
        "id": stream_id,
        "desired_state": state,
        "owner": owner,
        "lease_state": "held" if owner else "free",
        "generation": 2,
    }


def in_turn(*answers: Answer) -> Callable[[Recorded], Answer]:
    """Each answer once, in order; the last one from then on."""
    remaining = list(answers)

    def answer(_: Recorded) -> Answer:
        return remaining.pop(0) if len(remaining) > 1 else remaining[0]

    return answer


HELD = (200, stream("s1", "STOPPED", owner="0f1e2d3c4b5a69788796a5b4c3d2e1f0/4242-ab12"))
FREE = (200, stream("s1", "STOPPED"))
CONFLICT = (409, {"error": {"code": "conflict", "message": "still held", "field": "id"}})
NOT_FOUND = (404, {"error": {"code": "not_found", "message": "no stream s1", "field": "id"}})


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with serve_fake_api() as fake:
        yield fake


def requests_to(api: FakeApi, method: str) -> int:
    return sum(1 for r in api.requests if r.method == method)


@pytest.mark.parametrize("ids", [["s1"], ["s1", "s2"]])
def test_json_is_one_document_of_outcomes_whatever_the_number_of_ids(
    api: FakeApi, ids: list[str]
) -> None:
    """One id or several: ``{"results": [...], "summary": {...}}``, each with its outcome."""

    def create(request: Recorded) -> Answer:
        stream_id = json.loads(request.body)["id"]
        return (200 if stream_id == "s1" else 201), stream(stream_id, "STARTED")

    api.routes[("POST", "/streams")] = create
    pairs = [arg for stream_id in ids for arg in (stream_id, f"wss://x.example/{stream_id}")]
    code, out, err = run("--api", api.url, "--json", "start", *pairs)
    assert code == 0, err
    document = json.loads(out)
    expected = {"s1": "unchanged", "s2": "created"}
    assert [(r["id"], r["result"]) for r in document["results"]] == [(i, expected[i]) for i in ids]
    assert document["results"][0]["stream"]["id"] == "s1"
    assert document["summary"]["total"] == len(ids)


def test_json_for_one_id_carries_its_error_in_the_same_document(api: FakeApi) -> None:
    """A refused single stream: the error is in its result, stdout stays one document, exit 1."""
    api.routes[("POST", "/streams/s1/stop")] = NOT_FOUND
    code, out, err = run("--api", api.url, "--json", "stop", "s1")
    assert code == 1
    assert err == ""
    result = json.loads(out)["results"][0]
    assert result["id"] == "s1" and result["error"]["status"] == 404


def test_stop_wait_returns_once_the_holder_has_let_go(api: FakeApi) -> None:
    """``stop --wait``: polls the stream until nobody holds it, then says ``stopped``."""
    api.routes[("POST", "/streams/s1/stop")] = (202, HELD[1])
    api.routes[("GET", "/streams/s1")] = in_turn(HELD, HELD, FREE)
    code, out, err = run("--api", api.url, "stop", "--wait", "s1")
    assert code == 0, err
    assert out.startswith("stopped s1: STOPPED, owner -")
    assert requests_to(api, "GET") == 3


def test_stop_without_wait_does_not_poll(api: FakeApi) -> None:
    """Plain ``stop`` returns at once: ``stopping``, no read of the stream."""
    api.routes[("POST", "/streams/s1/stop")] = (202, HELD[1])
    code, out, _ = run("--api", api.url, "stop", "s1")
    assert code == 0
    assert out.startswith("stopping s1")
    assert requests_to(api, "GET") == 0


def test_stop_wait_gives_up_after_its_timeout(api: FakeApi) -> None:
    """A holder that never lets go: ``--wait-timeout`` ends the wait, exit 1, who holds it."""
    api.routes[("POST", "/streams/s1/stop")] = (202, HELD[1])
    api.routes[("GET", "/streams/s1")] = HELD
    code, _, err = run("--api", api.url, "stop", "--wait", "--wait-timeout", "0.2", "s1")
    assert code == 1
    assert "s1 is still held by 0f1e2d3c…/4242-ab12 after 0.2 s" in err


def test_rm_wait_deletes_once_the_holder_has_released(api: FakeApi) -> None:
    """``stop X && rm --wait X``: the 409 of a stream still held is waited out, then deleted."""
    api.routes[("DELETE", "/streams/s1")] = in_turn(CONFLICT, CONFLICT, (204, b""))
    api.routes[("GET", "/streams/s1")] = HELD
    code, out, err = run("--api", api.url, "rm", "--wait", "s1")
    assert code == 0, err
    assert out == "deleted s1\n"
    assert requests_to(api, "DELETE") == 3


def test_rm_wait_refuses_a_started_stream_at_once(api: FakeApi) -> None:
    """A STARTED stream will not be released by waiting: the API's 409 at once."""
    api.routes[("DELETE", "/streams/s1")] = CONFLICT
    api.routes[("GET", "/streams/s1")] = (200, stream("s1", "STARTED", owner="w1"))
    code, _, err = run("--api", api.url, "rm", "--wait", "s1")
    assert code == 1
    assert "[409 conflict]" in err
    assert requests_to(api, "DELETE") == 1


def test_rm_without_wait_reports_the_conflict(api: FakeApi) -> None:
    """Without ``--wait`` a stream still held is the API's 409, as before."""
    api.routes[("DELETE", "/streams/s1")] = CONFLICT
    code, _, err = run("--api", api.url, "rm", "s1")
    assert code == 1
    assert "still held" in err


def test_rm_of_a_stream_that_is_gone_succeeds_with_a_note(api: FakeApi) -> None:
    """Every command may be run again: ``rm`` of a deleted stream is done, exit 0."""
    api.routes[("DELETE", "/streams/s1")] = NOT_FOUND
    code, out, err = run("--api", api.url, "rm", "s1")
    assert code == 0, err
    assert out == "already deleted s1 (deleted before, or never created)\n"
    code, out, _ = run("--api", api.url, "--json", "rm", "s1", "s2")
    assert code == 0
    assert [r["result"] for r in json.loads(out)["results"]] == ["already_deleted"] * 2


class Fleet:
    """Holders that let go of their streams only once every stream was asked (to stop, or to
    be deleted), as when one worker's next renewal releases all it was told to: waiting for
    each stream in turn, with fewer requests in flight than streams, would never see one go."""

    def __init__(self, api: FakeApi, ids: list[str], *, let_go_after: str) -> None:
        self.ids = set(ids)
        self.let_go_after = let_go_after
        self.asked: set[str] = set()
        for stream_id in ids:
            api.routes[("POST", f"/streams/{stream_id}/stop")] = self.answer
            api.routes[("GET", f"/streams/{stream_id}")] = self.answer
            api.routes[("DELETE", f"/streams/{stream_id}")] = self.answer

    def answer(self, request: Recorded) -> Answer:
        stream_id = request.path.split("/")[2]
        if request.method == self.let_go_after:
            self.asked.add(stream_id)
        held = self.asked != self.ids
        if request.method == "DELETE":
            return CONFLICT if held else (204, b"")
        return (202 if request.method == "POST" else 200), stream(
            stream_id, "STOPPED", owner="w1" if held else None
        )


IDS = [f"s{i}" for i in range(12)]
ONE_AT_A_TIME = ("--concurrency", "2", "--wait-timeout", "10")


def test_stop_wait_of_many_streams_waits_for_them_together(api: FakeApi) -> None:
    """Every stop is sent before any wait ends, and the streams are waited for together: 12
    streams, 2 requests in flight, holders that let go only once all were told."""
    Fleet(api, IDS, let_go_after="POST")
    code, out, err = run("--api", api.url, "--json", "stop", "--wait", *ONE_AT_A_TIME, *IDS)
    assert code == 0, err
    assert [r["result"] for r in json.loads(out)["results"]] == ["stopped"] * len(IDS)


def test_rm_wait_of_many_streams_waits_for_them_together(api: FakeApi) -> None:
    """``rm --wait`` alike: every delete is tried before any is tried again."""
    Fleet(api, IDS, let_go_after="DELETE")
    code, out, err = run("--api", api.url, "--json", "rm", "--wait", *ONE_AT_A_TIME, *IDS)
    assert code == 0, err
    assert [r["result"] for r in json.loads(out)["results"]] == ["deleted"] * len(IDS)
