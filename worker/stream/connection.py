"""Opening one upstream WebSocket connection safely, and classifying how connections fail.

Pure parts (:func:`with_query`, :func:`describe_connect_error`, :func:`describe_close`) are
separate from the one function that touches the network, :func:`connect_upstream`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, NamedTuple
from urllib.parse import quote, unquote_plus

from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

from streamlease.profile import DEFAULT_PROFILE, Profile
from streamlease.settings import Settings, UpstreamLibrary
from streamlease.url_policy import UrlPolicy, check_address, parse_upstream_url
from worker.stream.transport import CloseBy, Closed, Target, UpstreamHandler, UpstreamTransport
from worker.stream.websocket import KeepaliveRegistry, open_websocket

MAX_FRAME_BYTES: Final = 1_000_000
"""Largest upstream message accepted, in bytes: a sink record must fit a 1 MiB Kinesis record."""
ENDED_CLOSE_CODES: Final = frozenset({1000})
"""Close codes with which the upstream says the stream is over (not retried): 1000, "normal
closure" — the meeting ended, the feed is done. 1001 ("going away": a server restarting) and
every other code are retried with backoff."""
RETRYABLE_4XX: Final = frozenset({408, 425, 429})
"""Handshake statuses below 500 that are transient (timeout, too early, too many requests)."""

_QUERY_SAFE: Final = ":@!$'()*,;=/?"
"""Characters a query value keeps as written (besides letters, digits and ``-._~``)."""

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``(host, port) -> IP addresses``; the default asks the event loop's ``getaddrinfo``."""


class Failure(NamedTuple):
    """How a failed connect or a closed connection is handled."""

    fatal: bool
    message: str
    status: int | None = None
    close_code: int | None = None


# --- pure parts ------------------------------------------------------------------------------


def with_query(resource: str, params: Sequence[tuple[str, str]]) -> str:
    """``resource`` (``/path?query``) with ``params`` (name, value) appended in order: any
    parameter of the same name already there is replaced, the others are kept byte for byte
    and in order. No ``params``: the resource as it is."""
    if not params:
        return resource
    names = {name for name, _ in params}
    path, _, query = resource.partition("?")
    kept = [
        part
        for part in query.split("&")
        if part and unquote_plus(part.partition("=")[0]) not in names
    ]
    kept += [f"{quote(name, safe='')}={quote(value, safe=_QUERY_SAFE)}" for name, value in params]
    return f"{path}?{'&'.join(kept)}"


def describe_connect_error(exc: BaseException) -> Failure:
    """Classify a failed connection attempt: fatal or retried, with a sanitized message."""
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        if 300 <= status < 400:
            return Failure(True, f"upstream redirected the handshake (HTTP {status})", status)
        if status < 300 or (status < 500 and status not in RETRYABLE_4XX):
            return Failure(True, f"upstream refused the handshake (HTTP {status})", status)
        return Failure(False, f"upstream failed the handshake (HTTP {status})", status)
    if isinstance(exc, TimeoutError):
        return Failure(False, "connecting to the upstream timed out")
    if isinstance(exc, socket.gaierror):
        return Failure(False, "upstream host name did not resolve")
    if isinstance(exc, ConnectionRefusedError):
        return Failure(False, "upstream refused the TCP connection")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Failure(False, "upstream TLS certificate did not verify")
    if isinstance(exc, ssl.SSLError):
        return Failure(False, "TLS handshake with the upstream failed")
    if isinstance(exc, OSError):
        return Failure(False, f"connecting to the upstream failed ({exc.strerror or 'OS error'})")
    if isinstance(exc, InvalidURI):
        return Failure(True, "upstream URL is not a valid WebSocket URI")
    if isinstance(exc, InvalidHandshake):
        return Failure(False, f"upstream handshake was invalid ({type(exc).__name__})")
    return Failure(False, f"connecting to the upstream failed ({type(exc).__name__})")


def describe_close(closed: Closed) -> Failure:
    """Classify a closed connection; ``fatal`` here means the stream ended (1000).

    The side that sent its close frame first decides: an upstream echoing our 1009 did not end
    the stream.
    """
    code = closed.code
    if closed.by is CloseBy.UPSTREAM:
        if code in ENDED_CLOSE_CODES:
            return Failure(True, f"upstream ended the stream (close code {code})", close_code=code)
        return Failure(False, f"upstream closed the connection (close code {code})", None, code)
    if closed.by is CloseBy.WORKER:
        if code == 1011:
            return Failure(False, "upstream did not answer keepalive pings", close_code=code)
        if code == 1009:
            return Failure(
                False, f"upstream sent a message over {MAX_FRAME_BYTES} bytes", close_code=code
            )
        return Failure(False, f"upstream broke the protocol (close code {code})", close_code=code)
    return Failure(False, "upstream connection lost without a close frame", close_code=1006)


# --- connecting ------------------------------------------------------------------------------


async def _open_picows(
    target: Target, handler: UpstreamHandler, keepalive: KeepaliveRegistry | None
) -> UpstreamTransport:
    """:func:`worker.stream.picows_client.open_picows`, imported when first used (a worker on
    websockets does without picows)."""
    from worker.stream.picows_client import open_picows

    return await open_picows(target, handler, keepalive)


async def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def connect_upstream(
    url: str,
    settings: Settings,
    handler: UpstreamHandler,
    *,
    query: Sequence[tuple[str, str]] = (),
    policy: UrlPolicy | None = None,
    resolver: Resolver | None = None,
    profile: Profile = DEFAULT_PROFILE,
    headers: Sequence[tuple[str, str]] = (),
    keepalive: KeepaliveRegistry | None = None,
) -> UpstreamTransport:
    """Open one WebSocket connection to ``url`` with the ``query`` parameters added (the resume
    point among them, as the profile places it); no retries. Its messages and its close go to
    ``handler``; ``keepalive`` (if given) watches it while it is open.

    The stream's ``profile`` says which subprotocols are offered; ``headers`` are extra
    handshake headers, placeholders filled.

    Every address the host resolves to must pass the URL policy (default: from ``settings``);
    the socket goes to a checked address — tried in resolver order until one accepts TCP — while
    the URL's host stays in ``Host`` and TLS's SNI (certificates verified), all within
    ``settings.connect_timeout_seconds``. No proxy, no redirect, no compression. Raises
    :class:`UrlRejected` (URL or an address refused), ``TimeoutError``, ``OSError`` or a
    websockets ``InvalidHandshake`` (``InvalidStatus`` for a non-101 answer). The caller owns the
    returned connection and must close it.
    """
    policy = policy or UrlPolicy.from_settings(settings)
    upstream = parse_upstream_url(url, policy)
    resource = with_query(upstream.resource, query)
    uri = f"{upstream.scheme}://{upstream.netloc}{resource}"
    async with asyncio.timeout(settings.connect_timeout_seconds):
        if upstream.literal_ip is not None:
            addresses: Sequence[str] = [str(upstream.literal_ip)]
        else:
            addresses = await (resolver or _getaddrinfo)(upstream.host, upstream.port)
            if not addresses:
                raise socket.gaierror(socket.EAI_NONAME, "no address")
            for address in addresses:
                check_address(address, policy)
        opener = (
            _open_picows if settings.upstream_library is UpstreamLibrary.PICOWS else open_websocket
        )
        refused: OSError | None = None
        for address in addresses:
            target = Target(
                uri,
                address,
                headers=headers,
                subprotocols=profile.subprotocols,
                max_size=MAX_FRAME_BYTES,
            )
            try:
                return await opener(target, handler, keepalive)
            except OSError as exc:
                if isinstance(exc, TimeoutError | ssl.SSLError):
                    raise
                refused = exc
        assert refused is not None
        raise refused
