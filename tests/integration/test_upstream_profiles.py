"""UpstreamReader with connection profiles against the real simulator in each of its feed modes:
a bearer token and a subprotocol in the handshake, a subscribe message that carries the resume
point, the seq in another field, binary frames and frames without a seq."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from local.upstream_sim import (
    UpstreamSimulator,
    binary_payload_for,
    payload_for,
    payload_path,
)
from streamlease.errors import UpstreamRejected
from streamlease.profile import Profile, parse_profile
from streamlease.schema import PayloadEncoding
from streamlease.settings import Settings
from worker.upstream import UpstreamMessage, UpstreamReader
from worker.upstream import reader as reader_module

SETTINGS = Settings(
    allow_insecure_ws=True,
    allow_loopback_upstreams=True,
    backoff_base_seconds=0.02,
    backoff_max_seconds=0.2,
    connect_timeout_seconds=2.0,
)


@pytest.fixture
async def sim() -> AsyncIterator[UpstreamSimulator]:
    async with UpstreamSimulator() as simulator:
        yield simulator


def profile(**fields: Any) -> Profile:
    return parse_profile(fields, secrets_prefix=None)


async def take(reader: UpstreamReader, count: int) -> list[UpstreamMessage]:
    messages: list[UpstreamMessage] = []
    async with asyncio.timeout(10):
        async for message in reader:
            messages.append(message)
            if len(messages) == count:
                break
    return messages


def fixed_headers(*pairs: tuple[str, str]) -> Any:
    async def headers() -> list[tuple[str, str]]:
        return list(pairs)

    return headers


def at(document: Any, path: str) -> Any:
    for name in path.split("."):
        document = document[name]
    return document


async def test_a_bearer_token_from_the_headers_opens_the_feed(sim: UpstreamSimulator) -> None:
    """The headers the resolver gives are sent in the handshake; a wrong token is a 401 that
    ends the reader as rejected, naming the status and nothing of the token."""
    url = sim.url_for("auth", rate=0, bearer="s3cr3t-token")
    auth = profile(headers={"Authorization": "Bearer {secret:feed}"})
    good = UpstreamReader(
        "auth",
        url,
        SETTINGS,
        profile=auth,
        headers=fixed_headers(("Authorization", "Bearer s3cr3t-token")),
    )
    async with good:
        assert [m.seq for m in await take(good, 3)] == [1, 2, 3]

    wrong = UpstreamReader(
        "auth", url, SETTINGS, profile=auth, headers=fixed_headers(("Authorization", "Bearer old"))
    )
    with pytest.raises(UpstreamRejected) as refused:
        await take(wrong, 1)
    assert "401" in str(refused.value)
    assert "old" not in str(refused.value) and "s3cr3t" not in str(refused.value)
    assert sim.stats("auth").auth_failures == 1


async def test_the_profiles_subprotocol_is_offered(sim: UpstreamSimulator) -> None:
    url = sim.url_for("proto", rate=0, subprotocol="feed.v2")
    reader = UpstreamReader("proto", url, SETTINGS, profile=profile(subprotocols=["feed.v2"]))
    async with reader:
        assert [m.seq for m in await take(reader, 2)] == [1, 2]
    assert sim.stats("proto").subprotocols == ["feed.v2"]
    refused = UpstreamReader("proto", url, SETTINGS)
    with pytest.raises(UpstreamRejected):
        await take(refused, 1)


async def test_the_subscribe_message_carries_the_resume_point_on_every_connect(
    sim: UpstreamSimulator,
) -> None:
    """``resume: open_message``: the first subscription asks for the checkpoint + 1, and after a
    dropped connection the next asks for what follows the last message delivered."""
    url = sim.url_for("sub", rate=200, subscribe=1, ack=1)
    subscribe = profile(
        open_message='{"type":"subscribe","from":{next_seq}}', resume="open_message"
    )
    reader = UpstreamReader("sub", url, SETTINGS, last_seq=40, profile=subscribe)
    async with reader:
        first = await take(reader, 5)
        sim.disconnect("sub")
        second = await take(reader, 5)
    seqs = [m.seq for m in first + second]
    assert seqs == list(range(41, 51))  # the ack frame (no seq) was skipped, nothing repeated
    assert sim.stats("sub").subscriptions == [41, 46]


async def test_the_seq_is_read_where_the_profile_says(sim: UpstreamSimulator) -> None:
    """``seq: data.u``: the frame's own field numbers the messages; the payload is kept whole."""
    url = sim.url_for("nested", rate=0, seq_field="data.u", from_seq=7)
    reader = UpstreamReader("nested", url, SETTINGS, last_seq=6, profile=profile(seq="data.u"))
    async with reader:
        messages = await take(reader, 4)
    assert [m.seq for m in messages] == [7, 8, 9, 10]
    for message in messages:
        document = json.loads(message.payload)
        assert at(document, "data.u") == message.seq
        assert at(document, payload_path("data.u")) == payload_for("nested", message.seq)
        assert message.encoding == PayloadEncoding.JSON


async def test_binary_frames_arrive_intact_and_numbered_by_the_reader(
    sim: UpstreamSimulator,
) -> None:
    """``seq: none`` with binary frames: bytes as sent, marked base64 for the sink, numbered
    from the checkpoint on."""
    url = sim.url_for("bin", rate=0, binary=1)
    reader = UpstreamReader("bin", url, SETTINGS, last_seq=100, profile=profile(seq="none"))
    async with reader:
        messages = await take(reader, 3)
    assert [m.seq for m in messages] == [101, 102, 103]
    assert [m.payload for m in messages] == [binary_payload_for("bin", n) for n in (1, 2, 3)]
    assert {m.encoding for m in messages} == {PayloadEncoding.BASE64}


async def test_frames_without_a_seq_are_numbered_as_text(sim: UpstreamSimulator) -> None:
    url = sim.url_for("plain", rate=0, noseq=1)
    reader = UpstreamReader("plain", url, SETTINGS, profile=profile(seq="none"))
    async with reader:
        messages = await take(reader, 3)
    assert [m.seq for m in messages] == [1, 2, 3]
    assert {m.encoding for m in messages} == {PayloadEncoding.TEXT}
    assert [json.loads(m.payload)["data"] for m in messages] == [
        payload_for("plain", n) for n in (1, 2, 3)
    ]


async def test_without_a_profile_frames_without_a_seq_are_malformed(
    sim: UpstreamSimulator,
) -> None:
    """The default profile is today's behaviour: a frame without an integer seq is not a
    message."""
    reader = UpstreamReader("plain2", sim.url_for("plain2", rate=0, noseq=1), SETTINGS)
    async with reader:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await reader.__anext__()
    assert reader.stats.malformed > 0 and reader.stats.messages == 0


async def test_a_connection_whose_open_message_was_interrupted_is_dropped_not_left_open(
    sim: UpstreamSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while it sends the open message (the holder ending), the reader has not kept
    the new connection yet: it drops it there, instead of leaving it to its keepalive."""

    async def interrupted(ws: Any, text: str) -> None:
        raise asyncio.CancelledError

    monkeypatch.setattr(reader_module, "_send_opening", interrupted)
    url = sim.url_for("cut", rate=10, subscribe=1)
    subscribe = profile(
        open_message='{"type":"subscribe","from":{next_seq}}', resume="open_message"
    )
    reader = UpstreamReader("cut", url, SETTINGS, profile=subscribe)
    with pytest.raises(asyncio.CancelledError):
        await reader.next_batch(1)
    async with asyncio.timeout(5):
        while not sim.stats("cut").close_codes_received:  # noqa: ASYNC110 - no event to wait on
            await asyncio.sleep(0.02)
    assert sim.stats("cut").close_codes_received == [None]  # dropped, no close frame
    await reader.close()
