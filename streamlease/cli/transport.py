"""HTTP transport for the API client: pooled keep-alive connections over urllib3, proxies.

urllib3 comes with botocore, so it costs no dependency. One :class:`HttpTransport` keeps up to
``max_connections`` connections per host open between requests and may be shared by threads,
which is what lets ``streamlease start -f`` send hundreds of requests from one process.

The transport is also the seam tests use: :class:`HttpTransport` can connect to another address
than the URL names (``connect_to``), so a request for
``https://abc.execute-api.<region>.amazonaws.com`` reaches a plain local server without DNS while
the ``Host`` header and the signature stay those of the real URL.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ProxyError

from streamlease.cli.config import ProxyConfig
from streamlease.errors import StreamleaseError

DEFAULT_MAX_CONNECTIONS: Final = 10


class TransportError(StreamleaseError):
    """The request did not get an HTTP response: refused, unreachable, timed out, TLS failure."""


@dataclass(frozen=True)
class Response:
    """An HTTP response as the client needs it. Header names are lower case."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Transport(Protocol):
    """Sends one request and returns its response; raises :class:`TransportError` otherwise.

    Implementations must be safe to call from several threads at once.
    """

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout_seconds: float,
    ) -> Response:
        """Send ``method url`` with exactly ``headers`` (plus Content-Length) and ``body``."""
        ...


@dataclass(frozen=True)
class ConnectTo:
    """Where to open the connection instead of the URL's host (tests, tunnels)."""

    host: str
    port: int
    tls: bool = False


class HttpTransport:
    """A :class:`Transport` over urllib3: keep-alive, no retries, no redirects, thread-safe.

    ``connect_to`` overrides the address (and TLS) the connection goes to; the request line and
    ``Host`` header still come from the URL. ``proxy`` says which requests go through which
    proxy (default: none). ``max_connections`` bounds the idle connections kept per host.
    """

    def __init__(
        self,
        connect_to: ConnectTo | None = None,
        *,
        proxy: ProxyConfig | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._connect_to = connect_to
        self._proxy = proxy or ProxyConfig()
        self._max_connections = max_connections
        self._tls = ssl.create_default_context()
        self._lock = threading.Lock()
        self._managers: dict[str | None, urllib3.PoolManager] = {}
        self._fixed: urllib3.HTTPConnectionPool | None = None

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout_seconds: float,
    ) -> Response:
        """Send one request. Raises :class:`TransportError` when no response arrives in time."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"not an http(s) URL: {parts.scheme}://{parts.netloc}")
        sent = dict(headers)
        if not any(name.lower() == "host" for name in sent):
            sent["Host"] = parts.netloc
        timeout = urllib3.Timeout(connect=timeout_seconds, read=timeout_seconds)
        proxy = None if self._connect_to else self._proxy.proxy_for(url)
        where = _where(self._connect_to, parts.hostname, parts.port, parts.scheme)
        try:
            if self._connect_to is not None:
                target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                response = self._fixed_pool(parts.hostname).urlopen(
                    method, target, body=body, headers=sent, timeout=timeout, **_ONCE
                )
            else:
                response = self._manager(proxy).urlopen(
                    method, url, body=body, headers=sent, timeout=timeout, **_ONCE
                )
        except ProxyError as exc:
            raise TransportError(
                f"the proxy {_redacted(proxy)} failed to reach {where}: {_reason(exc)}"
            ) from exc
        except (Urllib3Error, OSError) as exc:
            raise TransportError(_describe(exc, where, timeout_seconds)) from exc
        return Response(
            status=response.status,
            headers={name.lower(): value for name, value in response.headers.items()},
            body=response.data,
        )

    def _manager(self, proxy: str | None) -> urllib3.PoolManager:
        with self._lock:
            manager = self._managers.get(proxy)
            if manager is None:
                if proxy is None:
                    manager = urllib3.PoolManager(
                        maxsize=self._max_connections, ssl_context=self._tls
                    )
                else:
                    manager = _proxy_manager(proxy, self._max_connections, self._tls)
                self._managers[proxy] = manager
            return manager

    def _fixed_pool(self, url_host: str) -> urllib3.HTTPConnectionPool:
        assert self._connect_to is not None
        with self._lock:
            if self._fixed is None:
                to = self._connect_to
                if to.tls:
                    self._fixed = urllib3.HTTPSConnectionPool(
                        to.host,
                        to.port,
                        maxsize=self._max_connections,
                        ssl_context=self._tls,
                        server_hostname=url_host,
                        assert_hostname=url_host,
                    )
                else:
                    self._fixed = urllib3.HTTPConnectionPool(
                        to.host, to.port, maxsize=self._max_connections
                    )
            return self._fixed

    def close(self) -> None:
        """Close every pooled connection."""
        with self._lock:
            for manager in self._managers.values():
                manager.clear()
            self._managers.clear()
            if self._fixed is not None:
                self._fixed.close()
                self._fixed = None


# Every call is one attempt: the CLI reports a failure rather than repeating a POST.
_ONCE: Final = {"retries": False, "redirect": False, "preload_content": True}


def _proxy_manager(proxy: str, maxsize: int, tls: ssl.SSLContext) -> urllib3.ProxyManager:
    """A proxy manager for ``proxy`` (``http://[user:password@]host:port``)."""
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    headers = None
    if parts.username is not None:
        credentials = f"{parts.username}:{parts.password or ''}"
        headers = urllib3.make_headers(proxy_basic_auth=credentials)
    port = f":{parts.port}" if parts.port else ""
    bare = f"{parts.scheme}://{parts.hostname}{port}"
    return urllib3.ProxyManager(bare, proxy_headers=headers, maxsize=maxsize, ssl_context=tls)


def _where(connect_to: ConnectTo | None, host: str, port: int | None, scheme: str) -> str:
    if connect_to is not None:
        return f"{connect_to.host}:{connect_to.port}"
    return f"{host}:{port or (443 if scheme == 'https' else 80)}"


def _redacted(proxy: str | None) -> str:
    if not proxy:
        return "-"
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


def _describe(exc: BaseException, where: str, timeout_seconds: float) -> str:
    """One line saying why no response came, from the innermost cause urllib3 wrapped."""
    cause = _root(exc)
    if isinstance(cause, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(cause, socket.gaierror):
        return f"cannot resolve {where.rpartition(':')[0]}: {cause.strerror}"
    if isinstance(cause, TimeoutError) or "timed out" in str(exc).lower():
        return f"no answer from {where} within {timeout_seconds:g} s"
    if isinstance(cause, ssl.SSLError):
        return f"TLS failed with {where}: {cause.reason or cause}"
    return f"request to {where} failed: {_reason(exc)}"


def _root(exc: BaseException) -> BaseException:
    seen = exc
    while True:
        inner = seen.__cause__ or seen.__context__
        if inner is None or inner is seen:
            return seen
        seen = inner


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc)
