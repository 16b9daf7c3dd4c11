"""IP address ranges an upstream connection may never, or only by permission, go to.

Pure classification used by :mod:`streamlease.url_policy` (which decides with a policy): the
special-purpose ranges by class, the IPv4 addresses that IPv6 forms embed (v4-mapped,
v4-compatible, NAT64, 6to4, Teredo, SIIT) and the IPv4 spellings ``inet_aton`` accepts.
"""

from __future__ import annotations

import enum
import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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
            "192.88.99.0/24",  # 6to4 relay anycast (deprecated by RFC 7526; any relay answers)
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

ALWAYS_REFUSED: Final[frozenset[AddressClass]] = frozenset(
    {
        AddressClass.METADATA,
        AddressClass.LINK_LOCAL,
        AddressClass.UNSPECIFIED,
        AddressClass.MULTICAST,
        AddressClass.RESERVED,
    }
)
"""Classes refused by every policy, whatever it allows."""

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


__all__ = [
    "ALWAYS_REFUSED",
    "AddressClass",
    "IPAddress",
    "classify_address",
    "embedded_ipv4",
    "parse_ipv4",
]
