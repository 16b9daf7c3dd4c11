"""A stream's upstream link with connection profiles against the real simulator in each of its
feed modes: a bearer token and a subprotocol in the handshake, a subscribe message that carries
the resume point, the seq in another field, binary frames and frames without a seq."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from upstream_client import LinkRun

from local.upstream_sim import (
    UpstreamSimulator,
    binary_payload_for,
    payload_for,
    payload_path,
)
from streamlease.profile import Profile, parse_profile
from streamlease.settings import Settings
from streamlease.sink_fields import PayloadEncoding
from worker.stream.link import UpstreamEventKind
from worker.stream.sequence import Undeliverable

SETTINGS = Settings(
    allow_insecure_ws=True,
    allow_loopback_upstreams=True,
    backoff_base_seconds=0.02,
    backoff_max_seconds=0.2,
    connect_timeout_seconds=2.0,
)

pytestmark = pytest.mark.usefixtures("each_upstream_library")


@pytest.fixture
async def sim() -> AsyncIterator[UpstreamSimulator]:
    async with UpstreamSimulator() as simulator:
        yield simulator


def profile(**fields: Any) -> Profile:
    return parse_profile(fields, secrets_prefix=None)


def fixed_secrets(**values: str) -> Any:
    async def secrets() -> dict[str, str]:
        return dict(values)

    return secrets


def at(document: Any, path: str) -> Any:
    for name in path.split("."):
        document = document[name]
    return document


async def test_a_bearer_token_from_the_headers_opens_the_feed(sim: UpstreamSimulator) -> None:
    """The secrets the resolver gives are put into the handshake's headers; a wrong token is a
    401 that makes the stream rejected, naming the status and nothing of the token."""
    url = sim.url_for("auth", rate=0, bearer="s3cr3t-token")
    auth = profile(headers={"Authorization": "Bearer {secret:feed}"})
    good = fixed_secrets(feed="s3cr3t-token")
    async with LinkRun("auth", url, SETTINGS, profile=auth, secrets=good) as run:
        assert [r.seq for r in await run.take(3)] == [1, 2, 3]

    wrong = fixed_secrets(feed="old")
    async with LinkRun("auth", url, SETTINGS, profile=auth, secrets=wrong) as refused:
        rejected = await refused.event(UpstreamEventKind.REJECTED)
    assert "401" in rejected.error
    assert "old" not in rejected.error and "s3cr3t" not in rejected.error
    assert sim.stats("auth").auth_failures == 1


async def test_the_profiles_subprotocol_is_offered(sim: UpstreamSimulator) -> None:
    url = sim.url_for("proto", rate=0, subprotocol="feed.v2")
    async with LinkRun("proto", url, SETTINGS, profile=profile(subprotocols=["feed.v2"])) as run:
        assert [r.seq for r in await run.take(2)] == [1, 2]
    assert sim.stats("proto").subprotocols == ["feed.v2"]
    async with LinkRun("proto", url, SETTINGS) as refused:
        await refused.event(UpstreamEventKind.REJECTED)


async def test_the_subscribe_message_carries_the_resume_point_on_every_connect(
    sim: UpstreamSimulator,
) -> None:
    """``resume: open_message``: the first subscription asks for the checkpoint + 1, and after a
    dropped connection the next asks for what follows the last message taken in."""
    url = sim.url_for("sub", rate=200, subscribe=1, ack=1)
    subscribe = profile(
        open_message='{"type":"subscribe","from":{next_seq}}', resume="open_message"
    )
    async with LinkRun("sub", url, SETTINGS, last_seq=40, profile=subscribe) as run:
        await run.take(5)
        sim.disconnect("sub")
        await run.until(lambda: run.link.connects == 2 and len(run.records) >= 10)
    seqs = run.seqs
    assert seqs == list(range(41, 41 + len(seqs)))  # the ack (no seq) skipped, no repeat
    subscriptions = sim.stats("sub").subscriptions
    assert subscriptions[0] == 41 and subscriptions[1] > 41


async def test_the_seq_is_read_where_the_profile_says(sim: UpstreamSimulator) -> None:
    """``seq: data.u``: the frame's own field numbers the messages; the payload is kept whole."""
    url = sim.url_for("nested", rate=0, seq_field="data.u", from_seq=7)
    async with LinkRun("nested", url, SETTINGS, last_seq=6, profile=profile(seq="data.u")) as run:
        messages = await run.take(4)
    assert [m.seq for m in messages] == [7, 8, 9, 10]
    for message in messages:
        document = json.loads(message.payload)
        assert at(document, "data.u") == message.seq
        assert at(document, payload_path("data.u")) == payload_for("nested", message.seq)
        assert message.payload_encoding == PayloadEncoding.JSON


async def test_binary_frames_arrive_intact_and_numbered_by_the_worker(
    sim: UpstreamSimulator,
) -> None:
    """``seq: none`` with binary frames: bytes as sent, marked base64 for the sink, numbered
    from the checkpoint on."""
    url = sim.url_for("bin", rate=0, binary=1)
    async with LinkRun("bin", url, SETTINGS, last_seq=100, profile=profile(seq="none")) as run:
        messages = await run.take(3)
    assert [m.seq for m in messages] == [101, 102, 103]
    assert [bytes(m.payload) for m in messages] == [binary_payload_for("bin", n) for n in (1, 2, 3)]
    assert {m.payload_encoding for m in messages} == {PayloadEncoding.BASE64}


async def test_frames_without_a_seq_are_numbered_as_text(sim: UpstreamSimulator) -> None:
    url = sim.url_for("plain", rate=0, noseq=1)
    async with LinkRun("plain", url, SETTINGS, profile=profile(seq="none")) as run:
        messages = await run.take(3)
    assert [m.seq for m in messages] == [1, 2, 3]
    assert {m.payload_encoding for m in messages} == {PayloadEncoding.TEXT}
    assert [json.loads(m.payload)["data"] for m in messages] == [
        payload_for("plain", n) for n in (1, 2, 3)
    ]


async def test_without_a_profile_frames_without_a_seq_are_undeliverable(
    sim: UpstreamSimulator,
) -> None:
    """The default profile is today's behaviour: a frame without an integer seq is not a
    message; the cause is kept for the stream's state."""
    async with LinkRun("plain2", sim.url_for("plain2", rate=0, noseq=1), SETTINGS) as run:
        await run.until(lambda: run.sequencer.malformed > 10)
        await asyncio.sleep(0.2)
    assert run.records == []
    assert run.sequencer.undeliverable is Undeliverable.NO_SEQ


async def test_a_feed_that_wants_client_pings_keeps_a_link_that_sends_them(
    sim: UpstreamSimulator,
) -> None:
    """``ping_within``: without the profile's ping the feed closes the connection (4000, a
    retry); with it the connection stays, and the pongs are control frames, not malformed."""
    url = sim.url_for("pg", rate=0, until_seq=1, ping_within=1.5)
    async with LinkRun("pg", url, SETTINGS) as silent:
        closed = await silent.event(UpstreamEventKind.RETRYING)
    assert closed.close_code == 4000
    pinging = profile(
        ping={"send": '{"op":"ping"}', "interval_seconds": 1}, control=[{"op": "pong"}]
    )
    before = sim.stats("pg")
    async with LinkRun("pg", url, SETTINGS, profile=pinging) as run:
        await run.take(1)
        await asyncio.sleep(3.2)
        assert run.link.connects == 1
    stats = sim.stats("pg")
    assert stats.ping_timeouts == before.ping_timeouts
    assert stats.client_pings - before.client_pings >= 2
    assert run.sequencer.control >= 2 and run.sequencer.malformed == 0


async def test_a_login_and_an_exclusive_subscription_through_the_link(
    sim: UpstreamSimulator,
) -> None:
    """The simulator's login feed: the key (its digest in the URL) goes in the auth message,
    the subscription resumes after the checkpoint; a wrong key rejects the stream."""
    digest = hashlib.sha256(b"k3y").hexdigest()
    url = sim.url_for("li", rate=200, login=digest, subscribe=1)
    login = profile(
        open_messages=[
            {
                "send": '{"action":"auth","params":"{secret:k}"}',
                "expect": {"status": "auth_success"},
                "refuse": {"status": "auth_failed"},
            },
            '{"type":"subscribe","after":{last_seq}}',
        ],
        resume="open_message",
    )
    async with LinkRun(
        "li", url, SETTINGS, last_seq=40, profile=login, secrets=fixed_secrets(k="k3y")
    ) as run:
        await run.take(5)
        sim.disconnect("li")
        await run.until(lambda: run.link.connects == 2 and len(run.records) >= 10)
    seqs = run.seqs
    assert seqs == list(range(41, 41 + len(seqs)))
    assert sim.stats("li").subscriptions[0] == 41
    async with LinkRun(
        "li", url, SETTINGS, profile=login, secrets=fixed_secrets(k="wrong")
    ) as refused:
        rejected = await refused.event(UpstreamEventKind.REJECTED)
    assert rejected.error == "upstream refused open message 1"
