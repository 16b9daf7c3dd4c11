"""HTTP transport for the API client: one request, one response, over ``http.client``.

The transport is the seam tests use: :class:`HttpTransport` can connect to another address than
the URL names (``connect_to``), so a request for ``https://abc.execute-api.<region>.amazonaws.com``
reaches a plain local server without DNS while the ``Host`` header and the signature stay those of
the real URL.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from streamlease.errors import StreamleaseError


class TransportError(StreamleaseError):
    """The request did not get an HTTP response: refused, unreachable, timed out, TLS failure."""


@dataclass(frozen=True)
class Response:
    """An HTTP response as the client needs it. Header names are lower case."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Transport(Protocol):
    """Sends one request and returns its response; raises :class:`TransportError` otherwise."""

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
    """A :class:`Transport` over ``http.client``: a fresh connection per request, no redirects.

    ``connect_to`` overrides the address (and TLS) the connection goes to; the request line and
    ``Host`` header still come from the URL.
    """

    def __init__(self, connect_to: ConnectTo | None = None) -> None:
        self._connect_to = connect_to

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
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        if self._connect_to is not None:
            host, port, tls = self._connect_to.host, self._connect_to.port, self._connect_to.tls
        else:
            tls = parts.scheme == "https"
            host, port = parts.hostname, parts.port or (443 if tls else 80)
        connection: http.client.HTTPConnection
        if tls:
            connection = http.client.HTTPSConnection(
                host, port, timeout=timeout_seconds, context=ssl.create_default_context()
            )
        else:
            connection = http.client.HTTPConnection(host, port, timeout=timeout_seconds)
        sent = dict(headers)
        if not any(name.lower() == "host" for name in sent):
            sent["Host"] = parts.netloc
        try:
            connection.request(method, target, body=body, headers=sent)
            response = connection.getresponse()
            data = response.read()
            return Response(
                status=response.status,
                headers={name.lower(): value for name, value in response.getheaders()},
                body=data,
            )
        except ConnectionRefusedError as exc:
            raise TransportError(f"connection refused by {host}:{port}") from exc
        except TimeoutError as exc:
            raise TransportError(
                f"no answer from {host}:{port} within {timeout_seconds:g} s"
            ) from exc
        except ssl.SSLError as exc:
            raise TransportError(f"TLS failed with {host}:{port}: {exc.reason or exc}") from exc
        except socket.gaierror as exc:
            raise TransportError(f"cannot resolve {host}: {exc.strerror}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise TransportError(f"request to {host}:{port} failed: {exc}") from exc
        finally:
            connection.close()
