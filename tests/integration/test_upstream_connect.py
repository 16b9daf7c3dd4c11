"""Connect-time URL safety over real sockets: every resolved address is checked, the socket goes
to the checked address with the URL's name kept for Host/SNI, proxy variables are ignored and a
redirect is never followed."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence

import pytest
from upstream_client import LinkRun
from websockets.asyncio.client import connect

from local.upstream_sim import UpstreamSimulator
from streamlease.settings import Settings
from worker.stream.connection import Resolver
from worker.stream.link import UpstreamEventKind

LOCAL_ONLY_INSECURE = Settings(allow_insecure_ws=True, connect_timeout_seconds=2.0)
"""ws:// allowed (the simulator has no TLS) but loopback refused, as in production."""
LOOPBACK_ALLOWED = Settings(
    allow_insecure_ws=True, allow_loopback_upstreams=True, connect_timeout_seconds=2.0
)

pytestmark = pytest.mark.usefixtures("each_upstream_library")


@pytest.fixture
async def sim() -> AsyncIterator[UpstreamSimulator]:
    async with UpstreamSimulator() as simulator:
        yield simulator


def resolving_to(*addresses: str) -> Resolver:
    """A resolver that answers every name with ``addresses`` (a DNS we control)."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        return addresses

    return resolve


async def rejection(run: LinkRun) -> str:
    """The error of the run's first rejection (waiting for it)."""
    return (await run.event(UpstreamEventKind.REJECTED)).error


async def test_localhost_is_refused_when_loopback_is_not_allowed(sim: UpstreamSimulator) -> None:
    """``localhost`` never reaches the socket layer under the production policy."""
    async with LinkRun("s", sim.url_for("s", host="localhost"), LOCAL_ONLY_INSECURE) as run:
        assert "loopback" in await rejection(run)
    assert not run.kinds(UpstreamEventKind.CONNECTED)
    assert sim.attempts("s") == 0


async def test_a_name_that_resolves_to_loopback_is_refused_at_connect_time(
    sim: UpstreamSimulator,
) -> None:
    """A harmless-looking name pointing at 127.0.0.1 (DNS rebinding) is caught after DNS."""
    url = sim.url_for("s", host="upstream.example")
    resolver = resolving_to("127.0.0.1")
    async with LinkRun("s", url, LOCAL_ONLY_INSECURE, resolver=resolver) as run:
        assert "127.0.0.1 is loopback" in await rejection(run)
    assert sim.attempts("s") == 0


async def test_one_blocked_address_among_several_refuses_the_host() -> None:
    """Every resolved address must pass, not just the first one."""
    resolver = resolving_to("93.184.215.14", "10.1.2.3")
    url = "ws://upstream.example:8765/s"
    async with LinkRun("s", url, LOCAL_ONLY_INSECURE, resolver=resolver) as run:
        assert "10.1.2.3 is private" in await rejection(run)


@pytest.mark.parametrize("address", ["169.254.169.254", "169.254.170.2", "::ffff:169.254.169.254"])
async def test_metadata_addresses_are_refused_even_when_everything_is_allowed(
    address: str,
) -> None:
    """Instance and task metadata stay out of reach whatever the local policy allows."""
    permissive = Settings(
        allow_insecure_ws=True, allow_loopback_upstreams=True, allow_private_upstreams=True
    )
    resolver = resolving_to(address)
    async with LinkRun("s", "ws://upstream.example/s", permissive, resolver=resolver) as run:
        await rejection(run)
    assert not run.kinds(UpstreamEventKind.CONNECTED)


async def test_localhost_connects_when_loopback_is_allowed(sim: UpstreamSimulator) -> None:
    """The local stack's policy: the real resolver, loopback allowed, Host header kept."""
    async with LinkRun("s", sim.url_for("s", host="localhost"), LOOPBACK_ALLOWED) as run:
        assert [r.seq for r in await run.take(1)] == [1]
    assert sim.stats("s").last_host_header == f"localhost:{sim.port}"


async def test_the_socket_goes_to_the_checked_address_and_host_keeps_the_name(
    sim: UpstreamSimulator,
) -> None:
    """The name is resolved once, by us; the connection is pinned to the checked address."""
    url = sim.url_for("s", host="upstream.example")
    resolver = resolving_to("127.0.0.1")
    async with LinkRun("s", url, LOOPBACK_ALLOWED, resolver=resolver) as run:
        assert [r.seq for r in await run.take(1)] == [1]
    assert sim.stats("s").last_host_header == f"upstream.example:{sim.port}"


async def test_addresses_are_tried_in_order_until_one_accepts(sim: UpstreamSimulator) -> None:
    """A refused first address (e.g. ::1 when the upstream listens on IPv4 only) is skipped."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.2", 0))
        dead = unused.getsockname()[0]
    resolver = resolving_to(dead, "127.0.0.1")
    url = sim.url_for("s", host="upstream.example")
    async with LinkRun("s", url, LOOPBACK_ALLOWED, resolver=resolver) as run:
        assert [r.seq for r in await run.take(1)] == [1]
    assert run.link.retries == 0


async def test_proxy_environment_variables_are_ignored(
    sim: UpstreamSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every proxy variable pointing at a dead port the link still connects directly,
    while a plain websockets client (which honours them) cannot."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead_port = unused.getsockname()[1]
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead_port}")
    url = sim.url_for("s")
    with pytest.raises(OSError):
        async with asyncio.timeout(5), connect(url):
            pass
    async with LinkRun("s", url, LOOPBACK_ALLOWED) as run:
        assert [r.seq for r in await run.take(1)] == [1]


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_at_the_handshake_is_refused_not_followed(
    sim: UpstreamSimulator, status: int
) -> None:
    """A 3xx answer is final — redirects could lead anywhere the policy never checked: the
    stream is rejected, and nothing else is connected to."""
    async with LinkRun("s", sim.url_for("s", reject=status), LOOPBACK_ALLOWED) as run:
        rejected = await run.event(UpstreamEventKind.REJECTED)
    assert rejected.status == status
    assert "redirected" in rejected.error
    assert sim.attempts("s") == 1
    assert not run.kinds(UpstreamEventKind.CONNECTED)


async def test_a_refused_tcp_connection_is_retried_until_closed() -> None:
    """Nothing listening: retry with backoff, report each failure, stop when told."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings = Settings(
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        backoff_base_seconds=0.01,
        backoff_max_seconds=0.05,
    )
    async with LinkRun("s", f"ws://127.0.0.1:{port}/s", settings) as run:
        await asyncio.sleep(0.3)
    retries = run.kinds(UpstreamEventKind.RETRYING)
    assert len(retries) >= 3
    assert all("refused" in e.error for e in retries)
