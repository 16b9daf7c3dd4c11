"""The open messages of a connection (a login awaiting its answer, then a subscribe), their
refusals, and application pings — the link against scripted connections (no sockets)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from test_upstream_link_logic import FakeTransport, Stream, run_until, upstream
from websockets.frames import TEXT, Frame

from streamlease.profile import Profile, parse_profile
from worker.stream.link import UpstreamEventKind

__all__ = ["upstream"]  # the fixture, used by name

SECRET = "PKs3cr3tK3y"
LOGIN = {
    "send": '{"action":"auth","params":"{secret:streamlease/feed#key}"}',
    "expect": {"status": "auth_success"},
    "refuse": {"status": "auth_failed"},
    "timeout_seconds": 1,
}
SUBSCRIBE = '{"action":"subscribe","after":{last_seq}}'


def login_profile(**extra: Any) -> Profile:
    return parse_profile(
        {"open_messages": [LOGIN, SUBSCRIBE], "resume": "open_message", **extra},
        secrets_prefix=None,
    )


async def feed_secrets() -> dict[str, str]:
    return {"streamlease/feed#key": SECRET}


async def eventually(check: Callable[[], bool]) -> None:
    """Wait (at most 5 s) until ``check()`` holds: the fakes have no event to wait on."""
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110 - polling a fake's state
            await asyncio.sleep(0.02)


def frame(document: Any) -> Frame:
    return Frame(TEXT, json.dumps(document).encode())


class LoginFeed(FakeTransport):
    """Greets, answers the login with ``answer`` (None: never), then sends seqs after the
    subscribe."""

    def __init__(self, answer: str | None, seqs: list[int]) -> None:
        super().__init__([])
        self.answer = answer
        self.seqs = seqs

    def start(self, handler: Any) -> None:
        super().start(handler)
        handler.messages_received([frame([{"ev": "status", "status": "connected"}])])

    def send_text(self, text: str) -> None:
        super().send_text(text)
        assert self.handler is not None
        sent = json.loads(text)
        if sent["action"] == "auth" and self.answer is not None:
            answer = frame([{"ev": "status", "status": self.answer}])
            self.handler.messages_received([answer])
        elif sent["action"] == "subscribe":
            self.handler.messages_received([frame({"seq": n}) for n in self.seqs])


async def test_a_login_is_answered_before_the_subscribe_and_only_data_is_delivered(
    upstream: Any,
) -> None:
    """The login carries the secret (JSON-escaped), the greeting before its answer is not
    data, the subscribe goes only after the answer and carries the checkpoint itself."""
    transport = LoginFeed("auth_success", [8, 9])
    upstream(transport)
    stream = Stream(last_seq=7, profile=login_profile(), secrets=feed_secrets)
    await run_until(stream, 2)
    assert transport.sent == [
        '{"action":"auth","params":"PKs3cr3tK3y"}',
        '{"action":"subscribe","after":7}',
    ]
    assert stream.seqs == [8, 9]


async def test_a_refused_login_rejects_the_stream_and_reads_the_secret_again(
    upstream: Any,
) -> None:
    forgotten: list[bool] = []
    transport = LoginFeed("auth_failed", [1])
    upstream(transport)
    stream = Stream(
        profile=login_profile(),
        secrets=feed_secrets,
        forget_secrets=lambda: forgotten.append(True),
    )
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(stream.link.run())
        await eventually(lambda: bool(stream.kinds(UpstreamEventKind.REJECTED)))
        await stream.link.close(1000)
    rejected = stream.kinds(UpstreamEventKind.REJECTED)[0]
    assert rejected.error == "upstream refused open message 1"
    assert SECRET not in rejected.error
    assert transport.closed_with == 1006  # dropped, not kept
    assert len(transport.sent) == 1  # no subscribe after a refusal
    assert forgotten and stream.seqs == []


async def test_a_login_without_an_answer_in_time_rejects_the_stream(upstream: Any) -> None:
    upstream(LoginFeed(None, [1]))
    stream = Stream(profile=login_profile(), secrets=feed_secrets)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(stream.link.run())
        await eventually(lambda: bool(stream.kinds(UpstreamEventKind.REJECTED)))
        await stream.link.close(1000)
    assert stream.kinds(UpstreamEventKind.REJECTED)[0].error == (
        "no answer to open message 1 within 1 s"
    )


async def test_the_application_ping_is_sent_every_interval_while_connected(
    upstream: Any,
) -> None:
    transport = FakeTransport([[1]])
    upstream(transport)
    pinging = parse_profile(
        {"ping": {"send": '{"op":"ping"}', "interval_seconds": 1}}, secrets_prefix=None
    )
    stream = Stream(profile=pinging)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(stream.link.run())
        await eventually(lambda: len(transport.sent) >= 2)
        await stream.link.close(1000)
    assert transport.sent[:2] == ['{"op":"ping"}', '{"op":"ping"}']
