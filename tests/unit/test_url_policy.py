"""The upstream URL policy: which URLs and addresses an upstream connection may go to (SSRF)."""

from __future__ import annotations

import ipaddress
import re
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlease.errors import UrlRejected
from streamlease.settings import Settings
from streamlease.url_policy import (
    URL_PATTERN,
    AddressClass,
    UrlPolicy,
    check_address,
    classify_address,
    embedded_ipv4,
    host_allowed,
    parse_ipv4,
    parse_upstream_url,
)

STRICT = UrlPolicy()
LOCAL = UrlPolicy(allow_insecure=True, allow_loopback=True)
VPC = UrlPolicy(allow_private=True)
EVERYTHING = UrlPolicy(allow_insecure=True, allow_loopback=True, allow_private=True)

# (address, class of the address itself)
CLASSES = [
    ("8.8.8.8", AddressClass.PUBLIC),
    ("2606:4700:4700::1111", AddressClass.PUBLIC),
    ("127.0.0.1", AddressClass.LOOPBACK),
    ("127.255.255.254", AddressClass.LOOPBACK),
    ("::1", AddressClass.LOOPBACK),
    ("10.1.2.3", AddressClass.PRIVATE),
    ("172.16.0.1", AddressClass.PRIVATE),
    ("172.31.255.255", AddressClass.PRIVATE),
    ("192.168.1.1", AddressClass.PRIVATE),
    ("100.64.0.1", AddressClass.PRIVATE),
    ("fd12:3456::1", AddressClass.PRIVATE),
    ("64:ff9b:1::a00:1", AddressClass.PRIVATE),
    ("169.254.169.254", AddressClass.METADATA),
    ("169.254.170.2", AddressClass.METADATA),
    ("fd00:ec2::254", AddressClass.METADATA),
    ("fd00:ec2::23", AddressClass.METADATA),
    ("100.100.100.200", AddressClass.METADATA),
    ("169.254.1.1", AddressClass.LINK_LOCAL),
    ("fe80::1", AddressClass.LINK_LOCAL),
    ("0.0.0.0", AddressClass.UNSPECIFIED),
    ("0.1.2.3", AddressClass.UNSPECIFIED),
    ("::", AddressClass.UNSPECIFIED),
    ("224.0.0.1", AddressClass.MULTICAST),
    ("ff02::1", AddressClass.MULTICAST),
    ("255.255.255.255", AddressClass.RESERVED),
    ("240.0.0.1", AddressClass.RESERVED),
    ("192.0.2.1", AddressClass.RESERVED),
    ("2001:db8::1", AddressClass.RESERVED),
    ("::127.0.0.1", AddressClass.RESERVED),
    ("172.32.0.1", AddressClass.PUBLIC),
    ("100.128.0.1", AddressClass.PUBLIC),
]


@pytest.mark.parametrize(("address", "expected"), CLASSES)
def test_classify_address(address: str, expected: AddressClass) -> None:
    """Each address falls in the range class the table names."""
    assert classify_address(ipaddress.ip_address(address)) is expected


# (IPv6 address, IPv4 addresses it leads to)
EMBEDDED = [
    ("::ffff:127.0.0.1", ["127.0.0.1"]),
    ("::ffff:169.254.169.254", ["169.254.169.254"]),
    ("64:ff9b::a9fe:a9fe", ["169.254.169.254"]),
    ("64:ff9b::7f00:1", ["127.0.0.1"]),
    ("2002:a9fe:a9fe::1", ["169.254.169.254"]),
    ("2002:7f00:1::", ["127.0.0.1"]),
    ("::a9fe:a9fe", ["169.254.169.254"]),
    ("::ffff:0:a9fe:aa02", ["169.254.170.2"]),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", ["65.54.227.120", "192.0.2.45"]),
    ("2606:4700:4700::1111", []),
    ("::1", []),
]


@pytest.mark.parametrize(("address", "expected"), EMBEDDED)
def test_embedded_ipv4(address: str, expected: list[str]) -> None:
    """v4-mapped, NAT64, 6to4, v4-compatible, SIIT and Teredo forms reveal their IPv4 address."""
    found = embedded_ipv4(ipaddress.IPv6Address(address))
    assert [str(a) for a in found] == expected


# (spelling, address it denotes); None = not an IPv4 spelling
SPELLINGS = [
    ("127.0.0.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("0X7F.0.0.1", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("017700000001", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("127.0.1", "127.0.0.1"),
    ("2852039166", "169.254.169.254"),
    ("0xa9fea9fe", "169.254.169.254"),
    ("0251.0376.0251.0376", "169.254.169.254"),
    ("169.254.43522", "169.254.170.2"),
    ("0", "0.0.0.0"),
    ("0x", "0.0.0.0"),
    ("8.8.8.8.", "8.8.8.8"),
    ("256.0.0.1", None),
    ("1.2.3.4.5", None),
    ("4294967296", None),
    ("08.0.0.1", None),
    ("0xg.0.0.1", None),
    ("1..1", None),
    ("example.com", None),
    ("", None),
]


@pytest.mark.parametrize(("spelling", "expected"), SPELLINGS)
def test_parse_ipv4_spellings(spelling: str, expected: str | None) -> None:
    """Decimal, octal, hex and short IPv4 spellings denote the address inet_aton gives them."""
    parsed = parse_ipv4(spelling)
    assert (None if parsed is None else str(parsed)) == expected


@pytest.mark.parametrize(("spelling", "expected"), [s for s in SPELLINGS if s[1] and s[0] != "0x"])
def test_parse_ipv4_agrees_with_inet_aton(spelling: str, expected: str) -> None:
    """The parser reads every valid spelling exactly as the C library's inet_aton does."""
    assert socket.inet_ntoa(socket.inet_aton(spelling.rstrip("."))) == expected


# (address, policy, allowed)
ADDRESS_POLICY = [
    ("8.8.8.8", STRICT, True),
    ("2606:4700:4700::1111", STRICT, True),
    ("127.0.0.1", STRICT, False),
    ("127.0.0.1", LOCAL, True),
    ("::1", LOCAL, True),
    ("::ffff:127.0.0.1", STRICT, False),
    ("::ffff:127.0.0.1", LOCAL, True),
    ("10.0.0.1", STRICT, False),
    ("10.0.0.1", LOCAL, False),
    ("10.0.0.1", VPC, True),
    ("fd12::1", VPC, True),
    ("64:ff9b::a00:1", STRICT, False),
    ("64:ff9b::a00:1", VPC, True),
    ("64:ff9b::808:808", STRICT, True),
    ("2002:808:808::1", STRICT, True),
    ("2002:a00:1::1", STRICT, False),
    # refused in every mode, whatever the spelling
    ("169.254.169.254", EVERYTHING, False),
    ("169.254.170.2", EVERYTHING, False),
    ("fd00:ec2::254", EVERYTHING, False),
    ("[fd00:ec2::254]", EVERYTHING, False),
    ("fe80::1", EVERYTHING, False),
    ("fe80::1%eth0", EVERYTHING, False),
    ("::ffff:169.254.169.254", EVERYTHING, False),
    ("::ffff:a9fe:aa02", EVERYTHING, False),
    ("64:ff9b::a9fe:a9fe", EVERYTHING, False),
    ("2002:a9fe:a9fe::", EVERYTHING, False),
    ("::a9fe:a9fe", EVERYTHING, False),
    ("2852039166", EVERYTHING, False),
    ("0xa9.0xfe.0xa9.0xfe", EVERYTHING, False),
    ("0.0.0.0", EVERYTHING, False),
    ("::", EVERYTHING, False),
    ("239.1.1.1", EVERYTHING, False),
    ("ff05::2", EVERYTHING, False),
    ("255.255.255.255", EVERYTHING, False),
    ("100.100.100.200", EVERYTHING, False),
]


@pytest.mark.parametrize(("address", "policy", "allowed"), ADDRESS_POLICY)
def test_check_address(address: str, policy: UrlPolicy, allowed: bool) -> None:
    """check_address refuses exactly the ranges the policy does not allow."""
    if allowed:
        check_address(address, policy)
    else:
        with pytest.raises(UrlRejected) as caught:
            check_address(address, policy)
        assert caught.value.field == "ws_url"


# The deprecated 6to4 relay anycast prefix (RFC 7526): 192.88.99.1 in every spelling the
# policy reads, alone and inside the IPv6 forms that embed it.
SIX_TO_FOUR_RELAY_SPELLINGS = [
    "192.88.99.1",
    "192.88.99.255",
    "3227017985",  # decimal
    "0xc0586301",  # hex
    "0xc0.0x58.0x63.0x1",
    "0300.0130.0143.01",  # octal
    "192.88.25345",
    "::ffff:192.88.99.1",  # v4-mapped
    "::ffff:c058:6301",
    "64:ff9b::c058:6301",  # NAT64
    "2002:c058:6301::1",  # 6to4
]


@pytest.mark.parametrize("address", SIX_TO_FOUR_RELAY_SPELLINGS)
def test_six_to_four_relay_anycast_is_refused_in_every_mode(address: str) -> None:
    """192.88.99.0/24 is special-purpose: refused whatever the policy allows and the spelling."""
    with pytest.raises(UrlRejected) as caught:
        check_address(address, EVERYTHING)
    assert "reserved" in str(caught.value)


@pytest.mark.parametrize("host", ["192.88.99.1", "3227017985", "0xc0586301", "[2002:c058:6301::1]"])
def test_six_to_four_relay_anycast_urls_are_refused(host: str) -> None:
    """A ws_url whose host is a 6to4 relay anycast address is refused before anything connects."""
    with pytest.raises(UrlRejected) as caught:
        parse_upstream_url(f"wss://{host}/feed", EVERYTHING)
    assert caught.value.field == "ws_url"


def test_neighbours_of_the_six_to_four_relay_range_stay_public() -> None:
    """Only the /24 is refused: the addresses around it are ordinary public ones."""
    for address in ("192.88.98.255", "192.88.100.0"):
        assert classify_address(ipaddress.ip_address(address)) is AddressClass.PUBLIC


def test_check_address_rejects_a_non_address() -> None:
    """A string that is no IP address in any spelling is refused, not resolved."""
    with pytest.raises(UrlRejected):
        check_address("example.com", EVERYTHING)


def test_check_address_accepts_address_objects() -> None:
    """ipaddress objects are checked the same way as their text."""
    check_address(ipaddress.IPv4Address("1.1.1.1"), STRICT)
    with pytest.raises(UrlRejected):
        check_address(ipaddress.IPv6Address("fd00:ec2::254"), EVERYTHING)


# (url, policy, reason fragment or None when accepted)
URLS = [
    ("wss://example.com/feed", STRICT, None),
    ("wss://Example.COM./feed?x=1", STRICT, None),
    ("wss://8.8.8.8:9443/", STRICT, None),
    ("wss://[2606:4700:4700::1111]/", STRICT, None),
    ("ws://example.com/", STRICT, "wss://"),
    ("ws://example.com/", LOCAL, None),
    ("http://example.com/", EVERYTHING, "wss://"),
    ("https://example.com/", EVERYTHING, "wss://"),
    ("file:///etc/passwd", EVERYTHING, "wss://"),
    ("wss://user:pw@example.com/", STRICT, "credentials"),
    ("wss://user@example.com/", STRICT, "credentials"),
    ("wss://example.com@169.254.169.254/", EVERYTHING, "credentials"),
    ("wss://example.com/#frag", STRICT, "fragment"),
    ("wss://example.com/#", STRICT, "fragment"),
    ("wss:///nohost", STRICT, "host"),
    ("wss://:443/", STRICT, "host"),
    ("wss://exa mple.com/", STRICT, "ASCII"),
    ("wss://example.com\\@evil/", STRICT, "ASCII"),
    ("wss://exämple.com/", STRICT, "ASCII"),
    ("wss://example.com/\n", STRICT, "ASCII"),
    ("wss://-bad-.com/", STRICT, "DNS name"),
    ("wss://a..b/", STRICT, "DNS name"),
    ("wss://%31%32%37.0.0.1/", LOCAL, "numeric"),
    ("wss://%65xample.com/", STRICT, "DNS name"),
    ("wss://example.com:0/", STRICT, "port"),
    ("wss://example.com:65536/", STRICT, "port"),
    ("wss://example.com:http/", STRICT, "port"),
    ("wss://example.com:/", STRICT, "port"),
    ("wss://[::1/", LOCAL, "valid"),
    ("wss://[::1]x/", LOCAL, "IPv6"),
    ("wss://[zz::1]/", LOCAL, "valid"),
    ("wss://[fe80::1%25eth0]/", EVERYTHING, "zone"),
    ("wss://localhost/", STRICT, "loopback"),
    ("wss://api.localhost/", STRICT, "loopback"),
    ("ws://localhost:8765/s", LOCAL, None),
    ("ws://127.0.0.1:8765/s?rate=5", LOCAL, None),
    ("wss://127.0.0.1/", STRICT, "loopback"),
    ("wss://2130706433/", STRICT, "loopback"),
    ("wss://0x7f.1/", STRICT, "loopback"),
    ("wss://0177.0.0.1/", STRICT, "loopback"),
    ("wss://127.1/", STRICT, "loopback"),
    ("wss://[::1]/", STRICT, "loopback"),
    ("wss://[::ffff:127.0.0.1]/", STRICT, "loopback"),
    ("wss://10.0.0.5/", STRICT, "private"),
    ("wss://10.0.0.5/", VPC, None),
    ("wss://169.254.169.254/latest/meta-data/", EVERYTHING, "metadata"),
    ("ws://169.254.170.2/v2/credentials", EVERYTHING, "metadata"),
    ("wss://2852039166/", EVERYTHING, "metadata"),
    ("wss://0xa9fea9fe/", EVERYTHING, "metadata"),
    ("wss://[fd00:ec2::254]/", EVERYTHING, "metadata"),
    ("wss://[::ffff:169.254.169.254]/", EVERYTHING, "metadata"),
    ("wss://[64:ff9b::a9fe:a9fe]/", EVERYTHING, "metadata"),
    ("wss://[2002:a9fe:a9fe::]/", EVERYTHING, "metadata"),
    ("wss://[fe80::1]/", EVERYTHING, "link-local"),
    ("wss://169.254.1.1/", EVERYTHING, "link-local"),
    ("wss://0.0.0.0/", EVERYTHING, "unspecified"),
    ("wss://1.2.3.4.5/", EVERYTHING, "numeric"),
    ("wss://foo.123/", EVERYTHING, "numeric"),
    ("wss://" + "a" * 2050 + ".com/", STRICT, "longer"),
    ("", STRICT, "non-empty"),
]


@pytest.mark.parametrize(("url", "policy", "reason"), URLS)
def test_parse_upstream_url(url: str, policy: UrlPolicy, reason: str | None) -> None:
    """Each URL is accepted or refused for the stated reason, always naming ws_url."""
    if reason is None:
        parse_upstream_url(url, policy)
        return
    with pytest.raises(UrlRejected) as caught:
        parse_upstream_url(url, policy)
    assert reason in str(caught.value)
    assert caught.value.field == "ws_url"


def test_parsed_url_parts() -> None:
    """An accepted URL is split into scheme, canonical host, port and resource (path + query)."""
    parsed = parse_upstream_url("wss://Feed.Example.com./v1/s?from=3", STRICT)
    assert (parsed.scheme, parsed.host, parsed.port, parsed.resource) == (
        "wss",
        "feed.example.com",
        443,
        "/v1/s?from=3",
    )
    assert parsed.literal_ip is None
    assert parsed.netloc == "feed.example.com"


def test_numeric_host_is_canonicalised() -> None:
    """A literal in another spelling is replaced by the address it denotes, which was checked."""
    parsed = parse_upstream_url("ws://0x7f.1:8765", LOCAL)
    assert parsed.host == "127.0.0.1"
    assert parsed.literal_ip == ipaddress.IPv4Address("127.0.0.1")
    assert parsed.resource == "/"
    assert parsed.netloc == "127.0.0.1:8765"


def test_ipv6_literal_netloc_has_brackets() -> None:
    """An IPv6 host is bare in ``host`` and bracketed in ``netloc``."""
    parsed = parse_upstream_url("ws://[::1]:8765/x", LOCAL)
    assert parsed.host == "::1"
    assert parsed.netloc == "[::1]:8765"


def test_query_is_never_echoed_in_rejections() -> None:
    """Query strings may hold secrets; a rejection message does not repeat them."""
    with pytest.raises(UrlRejected) as caught:
        parse_upstream_url("ws://example.com/?token=s3cret", STRICT)
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("host", "allowed_hosts", "allowed"),
    [
        ("feed.example.com", (), True),
        ("feed.example.com", ("feed.example.com",), True),
        ("other.example.com", ("feed.example.com",), False),
        ("a.example.com", ("*.example.com",), True),
        ("a.b.example.com", ("*.example.com",), True),
        ("example.com", ("*.example.com",), False),
        ("badexample.com", ("*.example.com",), False),
        ("example.com.evil.net", ("*.example.com",), False),
    ],
)
def test_host_allow_list(host: str, allowed_hosts: tuple[str, ...], allowed: bool) -> None:
    """Exact names match themselves; ``*.name`` matches subdomains only."""
    assert host_allowed(host, allowed_hosts) is allowed


def test_allow_list_applies_to_urls() -> None:
    """A host off the allow-list is refused even if it is otherwise fine."""
    policy = UrlPolicy(allowed_hosts=("*.example.com",))
    parse_upstream_url("wss://feed.example.com/", policy)
    with pytest.raises(UrlRejected, match="allowed host list"):
        parse_upstream_url("wss://feed.example.org/", policy)


def test_policy_from_settings() -> None:
    """The policy takes its switches, allow-list and length limit from the settings."""
    settings = Settings(
        allow_insecure_ws=True,
        allow_loopback_upstreams=True,
        allow_private_upstreams=True,
        allowed_hosts=("Feed.Example.com.", "*.example.org"),
        max_url_length=100,
    )
    assert UrlPolicy.from_settings(settings) == UrlPolicy(
        allow_insecure=True,
        allow_loopback=True,
        allow_private=True,
        allowed_hosts=("feed.example.com", "*.example.org"),
        max_length=100,
    )


def test_default_settings_give_the_strict_policy() -> None:
    """Out of the box only public wss:// upstreams are allowed."""
    assert UrlPolicy.from_settings(Settings()) == STRICT


@given(st.text(max_size=300))
def test_arbitrary_text_is_accepted_or_rejected_cleanly(text: str) -> None:
    """No input makes the parser fail with anything but UrlRejected."""
    try:
        parse_upstream_url(text, EVERYTHING)
    except UrlRejected as exc:
        assert exc.field == "ws_url"


@given(
    st.one_of(
        st.text(max_size=80),
        st.from_regex(r"\A[wW][sS]{1,2}://[ -~]{1,60}\Z"),
        st.sampled_from(
            ["wss://feed.example.com/v1?a=1&b=%20", "WSS://Feed.Example.COM:8443/x", "ws://127.1/"]
        ),
    )
)
def test_every_accepted_url_has_the_documented_shape(url: str) -> None:
    """URL_PATTERN (the OpenAPI pattern of ws_url) never refuses a URL the policy accepts."""
    try:
        parse_upstream_url(url, EVERYTHING)
    except UrlRejected:
        return
    assert re.fullmatch(URL_PATTERN, url)


@pytest.mark.parametrize(
    "url", ["https://feed.example.com/", "wss://a b/", "wss://a\\b/", "wss://caf\u00e9/", "wss://"]
)
def test_the_documented_shape_refuses_what_the_policy_refuses_first(url: str) -> None:
    """Wrong scheme, spaces, backslashes, non-ASCII and an empty rest fail the pattern too."""
    assert re.fullmatch(URL_PATTERN, url) is None


@given(st.from_regex(r"\Awss?://[0-9a-fA-Fx.:\[\]%@]{1,40}(/[a-z]{0,5})?\Z"))
def test_accepted_literals_are_never_metadata(url: str) -> None:
    """Whatever the spelling, an accepted literal host is not link-local or metadata."""
    try:
        parsed = parse_upstream_url(url, EVERYTHING)
    except UrlRejected:
        return
    if parsed.literal_ip is not None:
        for address in (parsed.literal_ip, *embedded_ipv4(parsed.literal_ip)):
            kind = classify_address(address)
            assert kind not in (AddressClass.METADATA, AddressClass.LINK_LOCAL)
