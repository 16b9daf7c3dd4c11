"""Upstream URL policy (SSRF defence), shared by the API and the worker.

Two checks, one rule book:

* :func:`parse_upstream_url` is the static check, run by the API before anything is written and
  again by the worker before it connects: scheme, length, no userinfo, no fragment, a well-formed
  host on the allow-list, and — when the host is an IP literal in any spelling — its address.
* :func:`check_address` classifies one IP address. The worker calls it on every address a host
  name resolves to and connects to the address it checked, so DNS cannot swap in another one.

Link-local and cloud metadata addresses are refused in every mode; loopback and private ranges
only when the policy allows them (the local stack allows loopback, its simulator is 127.0.0.1).
IPv6 forms that embed an IPv4 address (v4-mapped, v4-compatible, NAT64, 6to4, Teredo) are judged
by the IPv4 address they lead to as well as by their own range.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, urlsplit

from streamlease.errors import UrlRejected
from streamlease.ip_ranges import (
    ALWAYS_REFUSED,
    AddressClass,
    IPAddress,
    classify_address,
    embedded_ipv4,
    parse_ipv4,
)
from streamlease.settings import Settings

FIELD: Final = "ws_url"
"""The request field every rejection names."""

SECURE_SCHEME: Final = "wss"
INSECURE_SCHEME: Final = "ws"
DEFAULT_PORTS: Final = {SECURE_SCHEME: 443, INSECURE_SCHEME: 80}


@dataclass(frozen=True)
class UrlPolicy:
    """What an upstream URL may be. The defaults are the strict production policy."""

    allow_insecure: bool = False
    """``ws://`` allowed (local stack only)."""
    allow_loopback: bool = False
    """127.0.0.0/8 and ::1 allowed (local stack only)."""
    allow_private: bool = False
    """RFC 1918, CGNAT (100.64/10) and unique-local IPv6 allowed (a VPC-internal upstream)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host allow-list; empty allows any host. ``*.example.com`` matches subdomains only."""
    max_length: int = 2048
    """Longest accepted URL, in characters."""

    @classmethod
    def from_settings(cls, settings: Settings) -> UrlPolicy:
        """The policy configured by ``settings`` (``allow_insecure_ws``, ``allowed_hosts``, ...)."""
        return cls(
            allow_insecure=settings.allow_insecure_ws,
            allow_loopback=settings.allow_loopback_upstreams,
            allow_private=settings.allow_private_upstreams,
            allowed_hosts=tuple(h.strip().lower().rstrip(".") for h in settings.allowed_hosts),
            max_length=settings.max_url_length,
        )


@dataclass(frozen=True)
class UpstreamUrl:
    """A URL that passed the static checks, split into what a client needs to connect.

    ``host`` is lower case without a trailing dot; for an IP literal it is the canonical address
    (``0x7f.1`` becomes ``127.0.0.1``, IPv6 without brackets), and ``literal_ip`` holds it.
    ``resource`` is the path (at least ``/``) plus ``?query`` when there is one.
    """

    url: str
    scheme: str
    host: str
    port: int
    resource: str
    literal_ip: IPAddress | None

    @property
    def netloc(self) -> str:
        """``host[:port]`` for a ``Host`` header, IPv6 in brackets, default port left out."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if DEFAULT_PORTS.get(self.scheme) == self.port:
            return host
        return f"{host}:{self.port}"


def _as_address(address: str | IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return address
    text = address.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        parsed = ipaddress.ip_address(text)
    except ValueError:
        parsed_v4 = parse_ipv4(text)
        if parsed_v4 is None:
            raise UrlRejected(f"{address!r} is not an IP address", FIELD) from None
        return parsed_v4
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.scope_id:
        # A zone id only makes sense for link-local, which is refused anyway; drop it so the
        # range checks see the plain address.
        parsed = ipaddress.IPv6Address(text.split("%", 1)[0])
    return parsed


def check_address(address: str | IPAddress, policy: UrlPolicy) -> None:
    """Refuse ``address`` unless ``policy`` lets an upstream connection go there.

    ``address`` is an IP address object or its text (any IPv4 spelling, IPv6 with or without
    brackets). Link-local, metadata, unspecified, multicast and reserved addresses are refused
    always; loopback and private ones unless the policy allows them. An IPv6 address embedding
    an IPv4 one is refused if either is. Raises :class:`UrlRejected` (field ``ws_url``).
    """
    parsed = _as_address(address)
    for candidate in (parsed, *embedded_ipv4(parsed)):
        kind = classify_address(candidate)
        if _allowed(kind, policy):
            continue
        shown = str(candidate) if candidate == parsed else f"{parsed} (leads to {candidate})"
        raise UrlRejected(f"ws_url address {shown} is {kind.value} and not allowed", FIELD)


def _allowed(kind: AddressClass, policy: UrlPolicy) -> bool:
    if kind is AddressClass.PUBLIC:
        return True
    if kind in ALWAYS_REFUSED:
        return False
    if kind is AddressClass.LOOPBACK:
        return policy.allow_loopback
    return policy.allow_private  # AddressClass.PRIVATE


# --- URL parsing -------------------------------------------------------------------------------

# Printable ASCII without space, backslash and the characters URL parsers disagree about.
_URL_CHAR: Final = r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]"
_URL_CHARS: Final = re.compile(f"{_URL_CHAR}+")

URL_PATTERN: Final = rf"^[Ww][Ss][Ss]?://{_URL_CHAR}+$"
"""The shape of every URL :func:`parse_upstream_url` can accept, as a regular expression that
JSON Schema (ECMA-262) and Python read alike: for request schemas. The checks go further."""

URL_RULE: Final = (
    "a wss:// URL (ws:// only where allowed) of printable ASCII characters without spaces "
    "or backslashes (percent-encode the rest)"
)
""":data:`URL_PATTERN` in words, for error messages and documentation."""
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL: Final = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")
_PORT_TAIL: Final = re.compile(r"(?::[0-9]*)?")
_LOCALHOST_NAMES: Final = ("localhost", ".localhost")


def parse_upstream_url(url: str, policy: UrlPolicy) -> UpstreamUrl:
    """Check ``url`` against ``policy`` without touching the network; split it for connecting.

    Refuses: not a string, longer than ``policy.max_length``, characters outside printable ASCII
    (or space, backslash), a scheme other than ``wss`` (``ws`` only with ``allow_insecure``),
    userinfo, a fragment, a missing or malformed host or port, a host not on the allow-list, the
    name ``localhost`` (unless loopback is allowed), and an IP literal that
    :func:`check_address` refuses. Numeric hosts in any IPv4 spelling are read as addresses.
    Raises :class:`UrlRejected` naming the field ``ws_url``; the message never repeats the query.
    """
    if not isinstance(url, str) or not url:
        raise UrlRejected("ws_url must be a non-empty string", FIELD)
    if len(url) > policy.max_length:
        raise UrlRejected(f"ws_url is longer than {policy.max_length} characters", FIELD)
    if not _URL_CHARS.fullmatch(url):
        raise UrlRejected(
            "ws_url may contain only printable ASCII without spaces or backslashes "
            "(percent-encode the rest)",
            FIELD,
        )
    try:
        parts = urlsplit(url)
    except ValueError:
        raise UrlRejected("ws_url is not a valid URL", FIELD) from None
    scheme = _check_scheme(parts, policy)
    if "@" in parts.netloc:
        raise UrlRejected("ws_url must not contain credentials (user:password@)", FIELD)
    if parts.fragment or "#" in url:
        raise UrlRejected("ws_url must not contain a fragment (#...)", FIELD)
    host, literal_ip = _check_host(parts)
    port = _check_port(parts, scheme)
    if literal_ip is not None:
        check_address(literal_ip, policy)
    elif not policy.allow_loopback and (
        host == _LOCALHOST_NAMES[0] or host.endswith(_LOCALHOST_NAMES[1])
    ):
        raise UrlRejected("ws_url host localhost is loopback and not allowed", FIELD)
    if not host_allowed(host, policy.allowed_hosts):
        raise UrlRejected(f"ws_url host {host} is not on the allowed host list", FIELD)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return UpstreamUrl(
        url=url, scheme=scheme, host=host, port=port, resource=resource, literal_ip=literal_ip
    )


def host_allowed(host: str, allowed_hosts: tuple[str, ...]) -> bool:
    """Whether ``host`` (lower case, no trailing dot) is on ``allowed_hosts``.

    An empty list allows every host. ``*.example.com`` matches ``a.example.com`` and deeper
    subdomains but not ``example.com`` itself; list both when both are meant.
    """
    if not allowed_hosts:
        return True
    for pattern in allowed_hosts:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def _check_scheme(parts: SplitResult, policy: UrlPolicy) -> str:
    scheme = parts.scheme.lower()
    if scheme == SECURE_SCHEME or (scheme == INSECURE_SCHEME and policy.allow_insecure):
        return scheme
    if scheme == INSECURE_SCHEME:
        raise UrlRejected("ws_url must use wss:// (ws:// is not allowed here)", FIELD)
    raise UrlRejected("ws_url must be a wss:// URL", FIELD)


def _check_host(parts: SplitResult) -> tuple[str, IPAddress | None]:
    netloc = parts.netloc
    if netloc.startswith("["):
        end = netloc.find("]")
        inside = netloc[1:end] if end > 0 else ""
        if end < 0 or not _PORT_TAIL.fullmatch(netloc[end + 1 :]):
            raise UrlRejected("ws_url host is not a valid IPv6 address", FIELD)
        try:
            address = ipaddress.IPv6Address(inside)
        except ValueError:
            raise UrlRejected("ws_url host is not a valid IPv6 address", FIELD) from None
        if address.scope_id:
            raise UrlRejected("ws_url must not carry an IPv6 zone id", FIELD)
        return str(address), address
    raw = (parts.hostname or "").rstrip(".") if "[" not in netloc else ""
    if not raw or "]" in netloc:
        raise UrlRejected("ws_url has no valid host", FIELD)
    # As in the WHATWG URL standard: a host whose last label is a number is an IPv4 address in
    # some spelling (2130706433, 0x7f.1, 0177.0.0.1), never a name to resolve.
    if _NUMERIC_LABEL.fullmatch(raw.rsplit(".", 1)[-1]):
        v4 = parse_ipv4(raw)
        if v4 is None:
            raise UrlRejected("ws_url host looks numeric but is not a valid IPv4 address", FIELD)
        return str(v4), v4
    if len(raw) > 253 or not all(_LABEL.fullmatch(label) for label in raw.split(".")):
        raise UrlRejected("ws_url host is not a valid DNS name", FIELD)
    return raw, None


def _check_port(parts: SplitResult, scheme: str) -> int:
    try:
        port = parts.port
    except ValueError:
        raise UrlRejected("ws_url port is not a number from 1 to 65535", FIELD) from None
    if port is None:
        if parts.netloc.endswith(":"):
            raise UrlRejected("ws_url port is empty", FIELD)
        return DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise UrlRejected("ws_url port is not a number from 1 to 65535", FIELD)
    return port


__all__ = [
    "URL_PATTERN",
    "URL_RULE",
    "AddressClass",
    "UpstreamUrl",
    "UrlPolicy",
    "check_address",
    "classify_address",
    "embedded_ipv4",
    "host_allowed",
    "parse_ipv4",
    "parse_upstream_url",
]
