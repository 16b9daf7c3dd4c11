"""Concurrent control-plane calls lose no update and never mix up requests.

Separate Lambda instances run at once, so the guarantee lives in DynamoDB: each state change is
one conditional write and the generation is incremented by the table, never read-modify-written.
The repository tests race separate clients (as separate instances would) on the moto server,
whose DynamoDB requests are serialised (atomic conditional writes, architecture §8).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from control_plane_support import Api

from lambdas import runtime
from lambdas.stream_repo import StreamConflict, StreamRepo
from streamlease import aws
from streamlease.schema import DesiredState

URL = "wss://feed.example.com/v1"
THREADS = 8
ROUNDS = 6


def run_in_threads(target: Any, count: int) -> list[Any]:
    """Run ``target(i)`` in ``count`` threads released together; their results in order."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []
    gate = threading.Barrier(count)

    def run(index: int) -> None:
        gate.wait()
        try:
            results[index] = target(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


def instance_repo(rt: runtime.Runtime) -> StreamRepo:
    """A repository with its own client, as another Lambda instance would have."""
    return StreamRepo(aws.client("dynamodb", rt.settings), rt.settings.table_name)


def test_racing_stops_and_starts_count_every_transition(
    api: Api, control_plane: runtime.Runtime
) -> None:
    """Each change that wins adds exactly one generation; none is lost or doubled."""
    assert api("POST", "/streams", body={"id": "s1", "ws_url": URL}).status == 201

    def flip(index: int) -> list[tuple[bool, int]]:
        repo = instance_repo(control_plane)
        target = DesiredState.STOPPED if index % 2 == 0 else DesiredState.STARTED
        outcomes = []
        for _ in range(ROUNDS):
            stream, changed = repo.set_desired_state("s1", target, f"caller-{index}")
            outcomes.append((changed, stream.generation))
        return outcomes

    outcomes = [o for per_thread in run_in_threads(flip, THREADS) for o in per_thread]
    won = sorted(generation for changed, generation in outcomes if changed)
    final = api("GET", "/streams/s1").body["generation"]
    assert final == 1 + len(won)
    assert won == list(range(2, final + 1))  # every generation was won exactly once


def test_racing_creates_make_one_stream(control_plane: runtime.Runtime) -> None:
    """Of concurrent identical creates exactly one creates; the others see it."""
    created = run_in_threads(
        lambda i: instance_repo(control_plane).create("s1", URL, f"caller-{i}")[1], THREADS
    )
    assert Counter(created) == Counter({True: 1, False: THREADS - 1})


def test_racing_creates_with_different_urls_keep_the_first(
    api: Api, control_plane: runtime.Runtime
) -> None:
    """Concurrent creates of one id with different URLs: one wins, the others conflict."""

    def create(index: int) -> str:
        try:
            instance_repo(control_plane).create("s1", f"{URL}/{index}", "caller")
        except StreamConflict as exc:
            return exc.field
        return f"{URL}/{index}"

    results = run_in_threads(create, THREADS)
    winners = [r for r in results if r != "ws_url"]
    assert len(winners) == 1
    assert api("GET", "/streams/s1").body["ws_url"] == winners[0]


def test_threaded_callers_of_the_handler_get_their_own_answers(api: Api) -> None:
    """Requests handled from many threads at once never see each other's id or caller."""

    def create(index: int) -> tuple[str, str]:
        result = Api()(
            "POST",
            "/streams",
            body={"id": f"s{index}", "ws_url": URL},
            identity={"userArn": f"arn:aws:iam::1:user/u{index}"},
        )
        assert result.status == 201
        return result.body["id"], result.body["created_by"]

    answers = run_in_threads(create, THREADS)
    assert answers == [(f"s{i}", f"arn:aws:iam::1:user/u{i}") for i in range(THREADS)]
