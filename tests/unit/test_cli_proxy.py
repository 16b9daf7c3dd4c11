"""The CLI through a proxy: HTTP(S)_PROXY and NO_PROXY as the AWS CLI and curl read them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cli_fake_api import run

from streamlease.cli.config import ProxyConfig


@dataclass
class FakeProxy:
    """Answers proxied ``GET http://...`` requests itself and refuses every CONNECT."""

    port: int
    seen: list[str] = field(default_factory=list)
    """Request lines' method and target, e.g. ``GET http://api.example.test/workers``."""
    authorization: list[str | None] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def proxy() -> Iterator[FakeProxy]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    fake = FakeProxy(server.server_address[1])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.seen.append(f"GET {self.path}")
            fake.authorization.append(self.headers.get("Proxy-Authorization"))
            data = json.dumps({"workers": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_CONNECT(self) -> None:
            fake.seen.append(f"CONNECT {self.path}")
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield fake
    server.shutdown()
    server.server_close()


def test_http_proxy_carries_requests_to_an_http_api(proxy: FakeProxy) -> None:
    """HTTP_PROXY: the request goes to the proxy with the API's absolute URL."""
    environ = {"HTTP_PROXY": proxy.url}
    code, out, err = run("--api", "http://api.example.test:8080", "workers", environ=environ)
    assert code == 0, err
    assert out == "no live workers\n"
    assert proxy.seen == ["GET http://api.example.test:8080/workers"]


def test_https_proxy_tunnels_to_an_https_api(proxy: FakeProxy) -> None:
    """HTTPS_PROXY: a CONNECT to the API's host; the proxy's refusal is one clear line."""
    environ = {"https_proxy": proxy.url}
    code, _, err = run("--api", "https://api.example.test/prod", "workers", environ=environ)
    assert code == 1
    assert proxy.seen == ["CONNECT api.example.test:443"]
    assert "the proxy http://127.0.0.1:" in err and "403" in err
    assert err.count("\n") == 1


def test_proxy_credentials_are_sent_and_never_printed(proxy: FakeProxy) -> None:
    """``http://user:secret@proxy``: basic auth to the proxy; errors name the proxy bare."""
    url = proxy.url.replace("http://", "http://ops:s3cret@")
    code, _, _ = run("--api", "http://api.example.test", "workers", environ={"HTTP_PROXY": url})
    assert code == 0
    assert proxy.authorization == ["Basic b3BzOnMzY3JldA=="]
    code, _, err = run("--api", "https://api.example.test", "workers", environ={"HTTPS_PROXY": url})
    assert code == 1 and "s3cret" not in err


def test_no_proxy_sends_a_host_direct(proxy: FakeProxy) -> None:
    """A host on NO_PROXY does not go through the proxy."""
    environ = {"HTTP_PROXY": proxy.url, "NO_PROXY": "example.test"}
    run("--api", "http://api.example.test:1/", "workers", "--timeout", "2", environ=environ)
    assert proxy.seen == []


@pytest.mark.parametrize(
    ("url", "no_proxy", "direct"),
    [
        ("https://api.example.com/", "", False),
        ("https://api.example.com/", "example.com", True),
        ("https://api.example.com/", ".example.com", True),
        ("https://api.example.com/", "other.com, example.com", True),
        ("https://notexample.com/", "example.com", False),
        ("https://api.example.com/", "api.example.com:8443", False),
        ("https://api.example.com:8443/", "api.example.com:8443", True),
        ("https://10.1.2.3/", "10.0.0.0/8", True),
        ("https://11.1.2.3/", "10.0.0.0/8", False),
        ("https://api.example.com/", "*", True),
        ("http://127.0.0.1:8080/", "", True),
        ("http://localhost:8080/", "", True),
        ("http://[::1]:8080/", "", True),
    ],
)
def test_no_proxy_rules(url: str, no_proxy: str, direct: bool) -> None:
    """NO_PROXY entries: domains with their subdomains, host:port, networks, ``*``; loopback is
    always direct (a proxy cannot reach this machine's loopback)."""
    config = ProxyConfig(
        {"http": "http://proxy:3128", "https": "http://proxy:3128", "no": no_proxy}
    )
    assert (config.proxy_for(url) is None) is direct


def test_lower_case_variables_win_as_in_curl() -> None:
    """``https_proxy`` before ``HTTPS_PROXY``, the way curl and urllib read them."""
    config = ProxyConfig.from_environment(
        {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:1"}
    )
    assert config.proxy_for("https://api.example.com/") == "http://lower:1"
