"""The upstream simulator itself: what it sends, its knobs, its feed modes (bearer, subprotocol,
subscribe, seq field, binary, no seq) and its three ways of running."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect as sync_connect

from local.upstream_sim import (
    UpstreamSimulator,
    binary_payload_for,
    payload_for,
    payload_path,
    run_in_thread,
    text_message,
)
from local.worker_process import REPO_ROOT

QUIET_SECONDS = 0.2
"""How long a test listens to conclude that nothing is sent."""


@pytest.fixture
async def sim() -> AsyncIterator[UpstreamSimulator]:
    async with UpstreamSimulator() as simulator:
        yield simulator


async def test_messages_are_numbered_timestamped_and_replayable(sim: UpstreamSimulator) -> None:
    """seq counts up from from_seq; data is payload_for(stream id, seq); ts is epoch ms."""
    async with connect(sim.url_for("a:b.c", rate=0, from_seq=7, until_seq=9)) as ws:
        bodies = [json.loads(await ws.recv()) for _ in range(3)]
    assert [b["seq"] for b in bodies] == [7, 8, 9]
    assert [b["data"] for b in bodies] == [payload_for("a:b.c", n) for n in (7, 8, 9)]
    assert all(b["ts"] > 1_600_000_000_000 for b in bodies)


async def test_a_feed_that_begins_at_0_replays_from_0_or_from_its_beginning(
    sim: UpstreamSimulator,
) -> None:
    """first_seq=0: asked for seq 0, or for nothing, it sends seq 0 first; a feed that begins
    at 1 asked for seq 0 starts at 1."""
    cases = [
        (sim.url_for("z", rate=0, first_seq=0, from_seq=0, until_seq=1), 0),
        (sim.url_for("z", rate=0, first_seq=0, until_seq=1), 0),
        (sim.url_for("one", rate=0, from_seq=0, until_seq=1), 1),
    ]
    for url, expected in cases:
        async with connect(url) as ws:
            assert json.loads(await ws.recv())["seq"] == expected
    assert (sim.stats("z").from_seqs, sim.stats("one").from_seqs) == ([0, 0], [0])


async def test_default_frames_are_byte_for_byte_the_default_text_message(
    sim: UpstreamSimulator,
) -> None:
    """Without mode parameters a frame is exactly text_message(stream id, seq, ts)."""
    async with connect(sim.url_for("ä/b", rate=0, until_seq=2)) as ws:
        raw = [await ws.recv() for _ in range(2)]
    for seq, frame in zip((1, 2), raw, strict=True):
        assert frame == text_message("ä/b", seq, json.loads(frame)["ts"]).decode()


async def test_pad_lengthens_data_by_that_many_filler_characters(sim: UpstreamSimulator) -> None:
    """pad=N: data is payload_for(stream id, seq) followed by N filler characters, so a
    benchmark can send feeds of a chosen size; seq and ts are unchanged."""
    async with connect(sim.url_for("p", rate=0, until_seq=2, pad=140)) as ws:
        frames = [await ws.recv() for _ in range(2)]
    bodies = [json.loads(frame) for frame in frames]
    assert [b["seq"] for b in bodies] == [1, 2]
    assert [b["data"] for b in bodies] == [payload_for("p", n) + "." * 140 for n in (1, 2)]
    assert all(
        len(frame) == len(text_message("p", n, b["ts"])) + 140
        for n, frame, b in zip((1, 2), frames, bodies, strict=True)
    )


async def test_until_seq_stops_sending_but_keeps_the_connection_open(
    sim: UpstreamSimulator,
) -> None:
    """After until_seq nothing more arrives and the connection stays up."""
    async with connect(sim.url_for("s", rate=0, until_seq=2)) as ws:
        assert [json.loads(await ws.recv())["seq"] for _ in range(2)] == [1, 2]
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await ws.recv()
        assert sim.stats("s").open == 1


async def test_drop_after_aborts_without_a_close_frame(sim: UpstreamSimulator) -> None:
    """drop_after=N: N messages, then the TCP connection is cut (the client sees 1006)."""
    async with connect(sim.url_for("s", rate=0, drop_after=2)) as ws:
        await ws.recv()
        await ws.recv()
        with pytest.raises(ConnectionClosedError) as closed:
            await ws.recv()
    assert closed.value.rcvd is None


async def test_a_bad_knob_is_answered_with_400(sim: UpstreamSimulator) -> None:
    """A knob that does not parse refuses the handshake instead of guessing."""
    with pytest.raises(InvalidStatus) as refused:
        async with connect(sim.url_for("s", rate="fast")):
            pass
    assert refused.value.response.status_code == 400


async def test_disconnect_ends_open_connections_of_one_stream(sim: UpstreamSimulator) -> None:
    """disconnect(stream, code) closes that stream's connections with the code."""
    async with connect(sim.url_for("s", rate=1)) as ws:
        await ws.recv()
        sim.disconnect("s", 1012)
        with pytest.raises(ConnectionClosedError) as closed:
            while True:
                await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012


def test_runs_in_a_thread_for_synchronous_tests() -> None:
    """run_in_thread: a started simulator whose faults and stats work from another thread."""
    with run_in_thread() as sim:
        sim.set_fault("s", reject=503, times=1)
        with pytest.raises(InvalidStatus):
            sync_connect(sim.url_for("s"))
        with sync_connect(sim.url_for("s", rate=0, until_seq=3)) as ws:
            assert json.loads(ws.recv())["seq"] == 1
        stats = sim.stats("s")
        assert (stats.attempts, stats.rejected, stats.accepted) == (2, 1, 1)


def test_runs_in_the_foreground_until_sigterm() -> None:
    """python -m local.upstream_sim prints one ready line, serves, and exits on SIGTERM."""
    process = subprocess.Popen(
        [sys.executable, "-m", "local.upstream_sim", "--port", "0"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert "ready on ws://127.0.0.1:" in ready
        port = int(ready.split("ws://127.0.0.1:")[1].split("/")[0])
        with sync_connect(f"ws://127.0.0.1:{port}/s?rate=0&until_seq=3") as ws:
            assert json.loads(ws.recv())["seq"] == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()


# --- feed modes ---------------------------------------------------------------------------------


async def assert_quiet(ws: ClientConnection) -> None:
    """Nothing arrives for QUIET_SECONDS."""
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(QUIET_SECONDS):
            await ws.recv()


async def test_bearer_mode_streams_to_the_matching_bearer_header(sim: UpstreamSimulator) -> None:
    """bearer=T: a handshake with Authorization: Bearer T is accepted and streams as usual."""
    url = sim.url_for("s", rate=0, until_seq=2, bearer="t0k-3n")
    async with connect(url, additional_headers={"Authorization": "Bearer t0k-3n"}) as ws:
        assert [json.loads(await ws.recv())["seq"] for _ in range(2)] == [1, 2]
    stats = sim.stats("s")
    assert (stats.accepted, stats.auth_failures) == (1, 0)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic t0k-3n"}],
    ids=["no header", "another token", "another scheme"],
)
async def test_bearer_mode_answers_401_without_the_bearer_token(
    sim: UpstreamSimulator, headers: dict[str, str]
) -> None:
    """bearer=T: no header, another token or another scheme gets 401, counted in auth_failures."""
    with pytest.raises(InvalidStatus) as refused:
        async with connect(sim.url_for("s", bearer="t0k-3n"), additional_headers=headers):
            pass
    assert refused.value.response.status_code == 401
    assert refused.value.response.headers["WWW-Authenticate"] == "Bearer"
    stats = sim.stats("s")
    assert (stats.attempts, stats.rejected, stats.auth_failures, stats.accepted) == (1, 1, 1, 0)


async def test_bearer_token_never_reaches_the_simulator_log(
    sim: UpstreamSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    """Even at DEBUG, the simulator logs neither the token nor the Authorization header."""
    caplog.set_level(logging.DEBUG)
    url = sim.url_for("s", rate=0, until_seq=1, bearer="s3cr3t-token")
    async with connect(url, additional_headers={"Authorization": "Bearer s3cr3t-token"}) as ws:
        await ws.recv()
    with pytest.raises(InvalidStatus):
        async with connect(url, additional_headers={"Authorization": "Bearer n0t-it"}):
            pass
    server_lines = [
        r.getMessage() for r in caplog.records if r.name.startswith("websockets.server")
    ]
    assert server_lines, "the simulator's connection log was not captured"
    assert not [line for line in server_lines if "s3cr3t-token" in line or "n0t-it" in line]


async def test_subprotocol_mode_selects_the_offered_subprotocol(sim: UpstreamSimulator) -> None:
    """subprotocol=P: a client offering P (among others) gets P, recorded in stats."""
    url = sim.url_for("s", rate=0, until_seq=1, subprotocol="feed.v2")
    async with connect(url, subprotocols=["feed.v1", "feed.v2"]) as ws:
        assert ws.subprotocol == "feed.v2"
        assert json.loads(await ws.recv())["seq"] == 1
    assert sim.stats("s").subprotocols == ["feed.v2"]


@pytest.mark.parametrize("offered", [None, ["feed.v1"]], ids=["none offered", "another offered"])
async def test_subprotocol_mode_answers_400_when_not_offered(
    sim: UpstreamSimulator, offered: list[str] | None
) -> None:
    """subprotocol=P: a client that does not offer P gets 400, counted."""
    with pytest.raises(InvalidStatus) as refused:
        async with connect(sim.url_for("s", subprotocol="feed.v2"), subprotocols=offered):
            pass
    assert refused.value.response.status_code == 400
    stats = sim.stats("s")
    assert (stats.rejected, stats.subprotocol_failures, stats.subprotocols) == (1, 1, [])


async def test_without_subprotocol_mode_none_is_selected(sim: UpstreamSimulator) -> None:
    """Without subprotocol=..., an offered subprotocol is not selected (as before)."""
    async with connect(sim.url_for("s", rate=0, until_seq=1), subprotocols=["x"]) as ws:
        assert ws.subprotocol is None
        await ws.recv()
    assert sim.stats("s").subprotocols == [None]


async def test_subscribe_mode_sends_nothing_until_a_subscription(sim: UpstreamSimulator) -> None:
    """subscribe=1: silence until {"type":"subscribe"}; other messages are ignored and counted."""
    async with connect(sim.url_for("s", rate=0, until_seq=3, subscribe=1)) as ws:
        await assert_quiet(ws)
        for ignored in (
            "hello",
            b"\x00binary",
            "[1, 2]",
            '{"type": "ping"}',
            '{"type": "subscribe", "from": "2"}',
            '{"type": "subscribe", "from": -1}',
        ):
            await ws.send(ignored)
        await assert_quiet(ws)
        await ws.send('{"type": "subscribe"}')
        assert [json.loads(await ws.recv())["seq"] for _ in range(3)] == [1, 2, 3]
    stats = sim.stats("s")
    assert (stats.ignored_messages, stats.subscriptions) == (6, [1])


async def test_subscription_from_overrides_from_seq(sim: UpstreamSimulator) -> None:
    """subscribe=1: an integer "from" in the subscription is where emission starts."""
    async with connect(sim.url_for("s", rate=0, from_seq=2, until_seq=9, subscribe=1)) as ws:
        await ws.send(json.dumps({"type": "subscribe", "from": 7, "channel": "x"}))
        bodies = [json.loads(await ws.recv()) for _ in range(3)]
    assert [b["seq"] for b in bodies] == [7, 8, 9]
    assert [b["data"] for b in bodies] == [payload_for("s", n) for n in (7, 8, 9)]
    stats = sim.stats("s")
    assert (stats.from_seqs, stats.subscriptions) == ([2], [7])


async def test_subscribe_ack_precedes_the_first_message(sim: UpstreamSimulator) -> None:
    """ack=1: {"type":"subscribed","from":N} (no seq) comes first; N defaults to from_seq."""
    async with connect(sim.url_for("s", rate=0, from_seq=4, until_seq=5, subscribe=1, ack=1)) as ws:
        await ws.send('{"type": "subscribe"}')
        ack = await ws.recv()
        assert [json.loads(await ws.recv())["seq"] for _ in range(2)] == [4, 5]
    assert json.loads(ack) == {"type": "subscribed", "from": 4}


async def test_a_second_subscription_is_ignored(sim: UpstreamSimulator) -> None:
    """subscribe=1: only the first subscription counts; later ones change nothing."""
    async with connect(sim.url_for("s", rate=0, until_seq=4, subscribe=1)) as ws:
        await ws.send('{"type": "subscribe", "from": 3}')
        assert json.loads(await ws.recv())["seq"] == 3
        await ws.send('{"type": "subscribe", "from": 1}')
        assert json.loads(await ws.recv())["seq"] == 4
        await assert_quiet(ws)
    stats = sim.stats("s")
    assert (stats.subscriptions, stats.ignored_messages) == ([3], 1)


async def test_seq_field_puts_the_seq_at_another_top_level_field(sim: UpstreamSimulator) -> None:
    """seq_field=sequence: {"sequence": n, "ts", "data"}, replayed from from_seq."""
    async with connect(
        sim.url_for("s", rate=0, from_seq=5, until_seq=6, seq_field="sequence")
    ) as ws:
        bodies = [json.loads(await ws.recv()) for _ in range(2)]
    assert [sorted(b) for b in bodies] == [["data", "sequence", "ts"]] * 2
    assert [b["sequence"] for b in bodies] == [5, 6]
    assert payload_path("sequence") == "data"
    assert [b["data"] for b in bodies] == [payload_for("s", n) for n in (5, 6)]


async def test_seq_field_under_data_moves_the_payload_to_data_d(sim: UpstreamSimulator) -> None:
    """seq_field=data.u: {"data": {"u": n, "d": payload}, "ts"}."""
    async with connect(sim.url_for("s", rate=0, from_seq=3, until_seq=4, seq_field="data.u")) as ws:
        bodies = [json.loads(await ws.recv()) for _ in range(2)]
    assert payload_path("data.u") == "data.d"
    assert [b["data"] for b in bodies] == [{"u": n, "d": payload_for("s", n)} for n in (3, 4)]
    assert [sorted(b) for b in bodies] == [["data", "ts"]] * 2


async def test_binary_mode_sends_binary_payloads_from_from_seq(sim: UpstreamSimulator) -> None:
    """binary=1: binary frames, each binary_payload_for(stream, seq); not decodable as text."""
    async with connect(sim.url_for("s", rate=0, binary=1, from_seq=9, until_seq=11)) as ws:
        frames = [await ws.recv() for _ in range(3)]
    assert frames == [binary_payload_for("s", n) for n in (9, 10, 11)]
    assert all(isinstance(frame, bytes) for frame in frames)
    assert int.from_bytes(frames[0][:8], "big") == 9
    with pytest.raises(UnicodeDecodeError):
        frames[0].decode()


async def test_noseq_mode_sends_no_sequence_field(sim: UpstreamSimulator) -> None:
    """noseq=1: {"ts", "data"} only; data is payload_for of n counting from from_seq."""
    async with connect(sim.url_for("s", rate=0, noseq=1, from_seq=3, until_seq=5)) as ws:
        bodies = [json.loads(await ws.recv()) for _ in range(3)]
    assert [sorted(b) for b in bodies] == [["data", "ts"]] * 3
    assert [b["data"] for b in bodies] == [payload_for("s", n) for n in (3, 4, 5)]


async def test_paced_modes_keep_their_rate(sim: UpstreamSimulator) -> None:
    """Modes work on paced streams too: subscribe + binary at 50 msg/s from the subscription."""
    async with connect(sim.url_for("s", rate=50, subscribe=1, binary=1)) as ws:
        await ws.send('{"type": "subscribe", "from": 2}')
        started = asyncio.get_running_loop().time()
        frames = [await ws.recv() for _ in range(6)]
        elapsed = asyncio.get_running_loop().time() - started
    assert frames == [binary_payload_for("s", n) for n in range(2, 8)]
    assert elapsed >= 5 / 50 * 0.8


async def test_bearer_subprotocol_subscribe_and_seq_field_combine(sim: UpstreamSimulator) -> None:
    """One URL can ask for a token, a subprotocol, a subscription with ack and a nested seq."""
    url = sim.url_for(
        "feed/1",
        rate=0,
        until_seq=12,
        bearer="abc",
        subprotocol="md.v1",
        subscribe=1,
        ack=1,
        seq_field="data.u",
    )
    async with connect(
        url,
        additional_headers={"Authorization": "bearer abc"},
        subprotocols=["md.v1"],
    ) as ws:
        await ws.send('{"type": "subscribe", "from": 11}')
        ack, *bodies = [json.loads(await ws.recv()) for _ in range(3)]
    assert ack == {"type": "subscribed", "from": 11}
    assert [b["data"] for b in bodies] == [
        {"u": n, "d": payload_for("feed/1", n)} for n in (11, 12)
    ]
    stats = sim.stats("feed/1")
    assert (stats.subprotocols, stats.subscriptions, stats.auth_failures) == (["md.v1"], [11], 0)


async def test_modes_can_be_set_as_a_fault(sim: UpstreamSimulator) -> None:
    """set_fault(bearer=...) makes the next connection of a stored URL need the token."""
    sim.set_fault("s", bearer="rotated", times=1)
    with pytest.raises(InvalidStatus) as refused:
        async with connect(sim.url_for("s")):
            pass
    assert refused.value.response.status_code == 401
    async with connect(sim.url_for("s", rate=0, until_seq=1)) as ws:
        assert json.loads(await ws.recv())["seq"] == 1


@pytest.mark.parametrize(
    "query",
    [
        {"subscribe": "yes"},
        {"ack": 1},
        {"seq_field": "ts"},
        {"seq_field": "data.d"},
        {"binary": 1, "noseq": 1},
        {"noseq": 1, "seq_field": "u"},
        {"bearer": ""},
        {"subprotocol": "a b"},
        {"pad": 1, "binary": 1},
        {"pad": -1},
    ],
    ids=lambda query: "&".join(f"{k}={v}" for k, v in query.items()),
)
async def test_a_bad_mode_is_answered_with_400(
    sim: UpstreamSimulator, query: dict[str, object]
) -> None:
    """A mode value that does not parse, or modes that do not combine, refuse the handshake."""
    with pytest.raises(InvalidStatus) as refused:
        async with connect(sim.url_for("s", **query)):
            pass
    assert refused.value.response.status_code == 400


# --- feeds that resume after K, log in, and want pings ---------------------------------------


async def test_after_resumes_exclusively(sim: UpstreamSimulator) -> None:
    """``after=K`` replays from K + 1 (the feed's own "after" parameter)."""
    async with connect(sim.url_for("ex", rate=0, after=6, until_seq=7)) as ws:
        assert json.loads(await ws.recv())["seq"] == 7
    assert sim.stats("ex").from_seqs == [7]


async def test_last_event_id_resumes_after_the_header(sim: UpstreamSimulator) -> None:
    """``last_event_id=1``: the handshake's Last-Event-ID header is the last seq seen."""
    url = sim.url_for("hdr", rate=0, last_event_id=1, until_seq=9)
    async with connect(url, additional_headers={"Last-Event-ID": "8"}) as ws:
        assert json.loads(await ws.recv())["seq"] == 9
    async with connect(url) as ws:  # no header: from the start
        assert json.loads(await ws.recv())["seq"] == 1
    assert sim.stats("hdr").from_seqs == [9, 1]


async def test_a_login_by_message_is_answered_before_the_subscription(
    sim: UpstreamSimulator,
) -> None:
    """``login=KEY``: a greeting, the auth answer, then the subscription starts the stream
    (``after`` in it is exclusive); a wrong key is answered auth_failed and closed 1008."""
    digest = hashlib.sha256(b"k3y").hexdigest()
    url = sim.url_for("li", rate=0, login=digest, subscribe=1, until_seq=6)
    async with connect(url) as ws:
        assert "connected" in await ws.recv()
        await ws.send('{"type":"subscribe","from":1}')  # before the login: ignored
        await ws.send(json.dumps({"action": "auth", "params": "k3y"}))
        assert "auth_success" in await ws.recv()
        await ws.send(json.dumps({"type": "subscribe", "after": 4}))
        assert [json.loads(await ws.recv())["seq"] for _ in range(2)] == [5, 6]
    async with connect(url) as refused:
        await refused.recv()
        await refused.send(json.dumps({"action": "auth", "params": "wrong"}))
        assert "auth_failed" in await refused.recv()
        with pytest.raises(ConnectionClosedError):
            await refused.recv()
    assert refused.close_code == 1008
    stats = sim.stats("li")
    assert (stats.logins, stats.login_failures, stats.subscriptions) == (1, 1, [5])
    assert "k3y" not in repr(stats) and "k3y" not in repr(sim)


async def test_a_client_that_does_not_ping_is_closed(sim: UpstreamSimulator) -> None:
    """``ping_within``: a client message within the interval keeps the connection (pings are
    answered with pongs); silence closes it with 4000 — WebSocket pings do not count."""
    url = sim.url_for("pg", rate=0, ping_within=0.3, until_seq=1)
    async with connect(url, ping_interval=0.05) as ws:
        assert json.loads(await ws.recv())["seq"] == 1
        for _ in range(3):
            await asyncio.sleep(0.15)
            await ws.send('{"op":"ping"}')
            assert json.loads(await ws.recv()) == {"op": "pong"}
        with pytest.raises(ConnectionClosedError):
            await ws.recv()
    assert ws.close_code == 4000
    stats = sim.stats("pg")
    assert (stats.client_pings, stats.ping_timeouts) == (3, 1)
