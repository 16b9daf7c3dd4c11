"""What the CLI reads from its environment: the API URL, the sink stream's name, proxies and
``NO_COLOR``, no more.

The CLI shares the environment with workers and the local stack, whose settings it does not
need: a worker setting that does not parse (``STREAMLEASE_LEASE_SECONDS=abc``) must not stop
``streamlease ls``. So only the variables named here reach :meth:`Settings.from_env`, which
still owns their names and their parsing. Proxies follow the convention the AWS CLI and curl
follow (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``, either case).
"""

from __future__ import annotations

import ipaddress
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from streamlease.settings import Settings, env_name

CLI_SETTINGS: Final = ("api_url", "local_host", "local_api_port", "kinesis_stream_name")
"""The only settings the CLI reads: where the API is (explicitly, or the local stack's), and the
sink stream ``consume`` reads (else the local stack's)."""


@dataclass(frozen=True)
class ProxyConfig:
    """Proxy URLs by scheme and the ``no_proxy`` list, as found in the environment.

    ``no_proxy`` entries are host names (which match their subdomains too, with or without a
    leading dot), ``host:port``, IP addresses or networks (``10.0.0.0/8``), or ``*`` for all.
    """

    proxies: Mapping[str, str] = field(default_factory=dict)
    """``http``/``https``: the proxy URL for that scheme; ``no``: hosts that go direct."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ProxyConfig:
        """Read ``http_proxy``, ``https_proxy`` and ``no_proxy`` (either case)."""
        if environ is None:
            return cls(dict(urllib.request.getproxies_environment()))
        found: dict[str, str] = {}
        for scheme in ("http", "https", "no"):
            for name in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY"):
                if environ.get(name):
                    found[scheme] = environ[name]
                    break
        return cls(found)

    def proxy_for(self, url: str) -> str | None:
        """The proxy URL to reach ``url`` through, or ``None`` to connect directly.

        Loopback hosts always go direct: a proxy cannot reach this machine's loopback.
        """
        parts = urlsplit(url)
        proxy = self.proxies.get(parts.scheme)
        host = (parts.hostname or "").lower()
        if not proxy or _is_loopback(host):
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if any(_bypasses(entry, host, port) for entry in self.proxies.get("no", "").split(",")):
            return None
        return proxy


@dataclass(frozen=True)
class CliConfig:
    """Everything the CLI takes from its environment."""

    settings: Settings
    """Settings built from :data:`CLI_SETTINGS` only; every other field keeps its default."""
    proxy: ProxyConfig
    colour: bool = True
    """False when ``NO_COLOR`` is set (https://no-color.org): no ANSI colours on a terminal."""

    @property
    def local_api_url(self) -> str:
        """The local stack's API (``make run``) as the settings place it."""
        return f"http://{self.settings.local_host}:{self.settings.local_api_port}"

    def api_url(self, explicit: str | None) -> str:
        """``--api`` if given, else ``STREAMLEASE_API_URL``, else the local stack's API."""
        return explicit or self.settings.api_url or self.local_api_url


def read_config(environ: Mapping[str, str] | None = None) -> CliConfig:
    """The CLI's configuration from ``environ`` (default: the process environment).

    Raises :class:`~streamlease.errors.ConfigError` naming the variable when one of the CLI's
    own settings does not parse; other ``STREAMLEASE_*`` variables are not looked at.
    """
    env = os.environ if environ is None else environ
    names = [env_name(name) for name in CLI_SETTINGS]
    own = {name: env[name] for name in names if name in env}
    return CliConfig(
        Settings.from_env(own),
        ProxyConfig.from_environment(environ),
        colour=not env.get("NO_COLOR"),
    )


def _bypasses(entry: str, host: str, port: int) -> bool:
    """Whether one ``no_proxy`` entry sends ``host:port`` direct."""
    entry = entry.strip().lower()
    if not entry:
        return False
    if entry == "*":
        return True
    name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
    if entry_port and entry_port != str(port):
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")) in ipaddress.ip_network(
            name.strip("[]"), strict=False
        )
    except ValueError:
        pass
    name = name.lstrip(".")
    return host == name or host.endswith("." + name)


def _has_port(entry: str) -> bool:
    tail = entry.rpartition(":")[2]
    return tail.isdigit() and (entry.count(":") == 1 or entry.startswith("["))


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
