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

import enum
import ipaddress
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, urlsplit

from streamlease.errors import UrlRejected
from streamlease.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

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


# --- address classification --------------------------------------------------------------------


class AddressClass(enum.Enum):
    """Why an address is special. ``PUBLIC`` is the only class every policy accepts."""

    PUBLIC = "public"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    LINK_LOCAL = "link-local"
    METADATA = "cloud metadata"
    UNSPECIFIED = "unspecified"
    MULTICAST = "multicast"
    RESERVED = "reserved"


_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(*cidrs: str) -> tuple[_Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Checked in order; the first match wins, so the always-refused metadata ranges come before the
# private range they sit in (fd00:ec2::/32 is inside fc00::/7, 100.100.100.200 inside 100.64/10).
_RANGES: Final[tuple[tuple[AddressClass, tuple[_Network, ...]], ...]] = (
    (
        AddressClass.METADATA,
        _nets(
            "169.254.169.254/32",  # EC2/ECS/GCP/Azure instance metadata
            "169.254.170.2/32",  # ECS task metadata and credentials
            "fd00:ec2::/32",  # EC2 IPv6 metadata (fd00:ec2::254), DNS and time sync
            "100.100.100.200/32",  # Alibaba Cloud metadata
            "168.63.129.16/32",  # Azure wire server
        ),
    ),
    (AddressClass.LINK_LOCAL, _nets("169.254.0.0/16", "fe80::/10")),
    (AddressClass.UNSPECIFIED, _nets("0.0.0.0/8", "::/128")),
    (AddressClass.LOOPBACK, _nets("127.0.0.0/8", "::1/128")),
    (AddressClass.MULTICAST, _nets("224.0.0.0/4", "ff00::/8")),
    (
        AddressClass.PRIVATE,
        _nets(
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "100.64.0.0/10",  # carrier-grade NAT
            "fc00::/7",  # unique local
            "fec0::/10",  # deprecated site-local
            "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): leads into a private network
        ),
    ),
    (
        AddressClass.RESERVED,
        _nets(
            "192.0.0.0/24",  # IETF protocol assignments
            "192.0.2.0/24",  # documentation
            "198.18.0.0/15",  # benchmarking
            "198.51.100.0/24",  # documentation
            "203.0.113.0/24",  # documentation
            "240.0.0.0/4",  # future use, and the limited broadcast address
            "::/96",  # deprecated IPv4-compatible IPv6 (:: and ::1 are matched above)
            "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
            "100::/64",  # discard-only
            "2001:db8::/32",  # documentation
            "2001:10::/28",  # ORCHID
            "2001:20::/28",  # ORCHIDv2
        ),
    ),
)

_ALWAYS_REFUSED: Final = frozenset(
    {
        AddressClass.METADATA,
        AddressClass.LINK_LOCAL,
        AddressClass.UNSPECIFIED,
        AddressClass.MULTICAST,
        AddressClass.RESERVED,
    }
)

_NAT64_WELL_KNOWN: Final = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")
_TEREDO: Final = ipaddress.IPv6Network("2001::/32")
_V4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")


def classify_address(address: IPAddress) -> AddressClass:
    """The class of ``address`` alone, without looking at any IPv4 address it embeds."""
    for kind, networks in _RANGES:
        for network in networks:
            if address.version == network.version and address in network:
                return kind
    return AddressClass.PUBLIC


def embedded_ipv4(address: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """IPv4 addresses an IPv6 address leads to: v4-mapped, v4-compatible, NAT64, 6to4, Teredo.

    Empty for an IPv4 address or a plain IPv6 one.
    """
    if isinstance(address, ipaddress.IPv4Address):
        return ()
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address in _NAT64_WELL_KNOWN:
        return (low32,)
    if address in _V4_COMPATIBLE and int(address) > 1:
        return (low32,)
    if address in _SIX_TO_FOUR and address.sixtofour is not None:
        return (address.sixtofour,)
    if address in _TEREDO and address.teredo is not None:
        return address.teredo
    if int(address) >> 32 == 0xFFFF_0000:  # ::ffff:0:a.b.c.d, IPv4-translated
        return (low32,)
    return ()


def parse_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """Read ``text`` as an IPv4 address in any spelling ``inet_aton`` and URL parsers accept.

    One to four dot-separated parts, each decimal, octal (leading ``0``) or hex (``0x``); the last
    part fills the remaining bytes (``127.1``, ``2130706433``, ``0x7f.1``, ``0177.0.0.1``). A single
    trailing dot is allowed. Returns ``None`` when ``text`` is not such a spelling.
    """
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4:
        return None
    numbers = []
    for part in parts:
        value = _ipv4_part(part)
        if value is None:
            return None
        numbers.append(value)
    *head, last = numbers
    if any(n > 0xFF for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _ipv4_part(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
        if digits == "":
            return 0
        allowed = "0123456789abcdefABCDEF"
    elif len(part) > 1 and part[0] == "0":
        digits, base, allowed = part[1:], 8, "01234567"
    else:
        digits, base, allowed = part, 10, "0123456789"
    if not digits or any(c not in allowed for c in digits):
        return None
    return int(digits, base)


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
    if kind in _ALWAYS_REFUSED:
        return False
    if kind is AddressClass.LOOPBACK:
        return policy.allow_loopback
    return policy.allow_private  # AddressClass.PRIVATE


# --- URL parsing -------------------------------------------------------------------------------

# Printable ASCII without space, backslash and the characters URL parsers disagree about.
_URL_CHARS: Final = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
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
