"""A small client for the streamlease REST API: one method per call, JSON in and out.

Against an ``execute-api`` URL every request is SigV4-signed; against any other URL (the local
stack) requests go unsigned. API errors become :class:`ApiError` with the status, the error code
and the field the API named.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from streamlease.cli.signing import SigV4Signer, execute_api_region
from streamlease.cli.transport import HttpTransport, Response, Transport
from streamlease.errors import StreamleaseError

USER_AGENT: Final = "streamlease-cli/1"
DEFAULT_TIMEOUT_SECONDS: Final = 10.0
PAGE_LIMIT: Final = 100
LOCAL_STACK_PATH: Final = "/local/stack"
"""Where a local stack's API describes the stack (its moto server, state directory, processes);
other APIs have no such route."""


class ApiError(StreamleaseError):
    """The API answered with an error status. ``code`` and ``field`` are the API's, if it said."""

    def __init__(self, status: int, message: str, code: str = "", field: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.field = field

    def __str__(self) -> str:
        label = f"{self.status} {self.code}".strip()
        where = f" (field: {self.field})" if self.field else ""
        return f"{self.message}{where} [{label}]"


class ApiClient:
    """Calls the streamlease API at ``base_url`` (e.g. ``https://….execute-api….com/prod``).

    ``signer`` defaults to SigV4 for ``execute-api`` hosts and none otherwise; ``transport``
    defaults to :class:`HttpTransport`. ``timeout_seconds`` bounds each request.
    Every method raises :class:`ApiError` for an error status (or a success that is not JSON)
    and :class:`~streamlease.cli.transport.TransportError` when no response arrives. Methods
    may be called from several threads at once.
    """

    def __init__(
        self,
        base_url: str,
        *,
        transport: Transport | None = None,
        signer: SigV4Signer | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"API URL must be http:// or https://, got {base_url!r}")
        if parts.query or parts.fragment:
            raise ValueError("API URL must not have a query or fragment")
        self.base_url = base_url.rstrip("/")
        self._host = _host_header(parts.scheme, parts.hostname, parts.port)
        self._transport = transport or HttpTransport()
        region = execute_api_region(base_url)
        self._signer = signer or (SigV4Signer(region) if region else None)
        self._timeout_seconds = timeout_seconds

    @property
    def signed(self) -> bool:
        """True when requests carry a SigV4 signature."""
        return self._signer is not None

    # --- calls ---------------------------------------------------------------------------------

    def create_stream(
        self, stream_id: str, ws_url: str, profile: dict[str, Any] | None = None
    ) -> tuple[bool, dict[str, Any]]:
        """``POST /streams``: create and start (with a connection ``profile``, None for the
        default). Returns (created, stream); ``False`` = no-op."""
        request: dict[str, Any] = {"id": stream_id, "ws_url": ws_url}
        if profile is not None:
            request["profile"] = profile
        status, body = self.request("POST", "/streams", body=request)
        return status == 201, body

    def stop_stream(self, stream_id: str) -> tuple[bool, dict[str, Any]]:
        """``POST /streams/{id}/stop``: desired state STOPPED. Returns (changed, stream);
        ``False``: it was stopped already."""
        status, body = self.request("POST", f"/streams/{_segment(stream_id)}/stop")
        return status == 202, body

    def start_stream(self, stream_id: str) -> tuple[bool, dict[str, Any]]:
        """``POST /streams/{id}/start``: desired state STARTED again. Returns (changed, stream);
        ``False``: it was started already."""
        status, body = self.request("POST", f"/streams/{_segment(stream_id)}/start")
        return status == 202, body

    def change_stream(
        self, stream_id: str, *, ws_url: str | None = None, profile: dict[str, Any] | None = None
    ) -> tuple[bool, dict[str, Any]]:
        """``PATCH /streams/{id}``: a new URL and/or whole profile. Returns (changed, stream);
        ``False``: it was so already (its generation did not move)."""
        request: dict[str, Any] = {}
        if ws_url is not None:
            request["ws_url"] = ws_url
        if profile is not None:
            request["profile"] = profile
        status, body = self.request("PATCH", f"/streams/{_segment(stream_id)}", body=request)
        return status == 202, body

    def get_stream(self, stream_id: str) -> dict[str, Any]:
        """``GET /streams/{id}``."""
        return self.request("GET", f"/streams/{_segment(stream_id)}")[1]

    def delete_stream(self, stream_id: str) -> None:
        """``DELETE /streams/{id}`` (only a stopped, unleased stream; 204 without a body)."""
        self.request("DELETE", f"/streams/{_segment(stream_id)}")

    def list_streams(
        self,
        *,
        state: str | None = None,
        connection_state: str | None = None,
        page_size: int = PAGE_LIMIT,
    ) -> Iterator[dict[str, Any]]:
        """``GET /streams`` (only ``state`` / ``connection_state`` ones when given), following
        ``next_token`` until the last page."""
        token: str | None = None
        while True:
            query: dict[str, str] = {"limit": str(page_size)}
            if state:
                query["state"] = state
            if connection_state:
                query["connection_state"] = connection_state
            if token:
                query["next_token"] = token
            page = self.request("GET", "/streams", query=query)[1]
            yield from page.get("streams") or []
            token = page.get("next_token")
            if not token:
                return

    def list_workers(self) -> list[dict[str, Any]]:
        """``GET /workers``: live workers and their stream counts."""
        workers = self.request("GET", "/workers")[1].get("workers") or []
        return list(workers)

    # --- plumbing ------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, dict[str, Any]]:
        """Send one request; returns (status, JSON body or ``{}``). Raises :class:`ApiError`."""
        url = self.base_url + path
        if query:
            url += "?" + urlencode(query, quote_via=quote, safe="")
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Host": self._host, "Accept": "application/json", "User-Agent": USER_AGENT}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._signer is not None:
            headers = self._signer.sign(method, url, headers, data)
        response = self._transport.send(method, url, headers, data, self._timeout_seconds)
        parsed = _json_object(response)
        if response.status >= 400:
            raise _api_error(response, parsed)
        if parsed is None and response.status != 204:
            # A proxy's or captive portal's page is not an answer of the API: say so, do not
            # print "no streams".
            raise ApiError(response.status, "the answer is not the API's JSON", code="not_json")
        return response.status, parsed or {}


def _segment(value: str) -> str:
    return quote(value, safe="")


def _host_header(scheme: str, hostname: str, port: int | None) -> str:
    host = f"[{hostname}]" if ":" in hostname else hostname
    default = 443 if scheme == "https" else 80
    return host if port in (None, default) else f"{host}:{port}"


def _json_object(response: Response) -> dict[str, Any] | None:
    if not response.body:
        return None
    try:
        value = json.loads(response.body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _api_error(response: Response, parsed: dict[str, Any] | None) -> ApiError:
    error = (parsed or {}).get("error")
    if isinstance(error, dict):
        return ApiError(
            response.status,
            str(error.get("message") or "request failed"),
            code=str(error.get("code") or ""),
            field=error.get("field") or None,
        )
    # API Gateway's own errors (403 from IAM auth, 429, 5xx) are {"message": ...} or {"Message"};
    # the local stack adds a "hint" to its 403 for an unknown route.
    for key in ("message", "Message"):
        if parsed and isinstance(parsed.get(key), str):
            hint = parsed.get("hint")
            return ApiError(response.status, parsed[key] + (f": {hint}" if hint else ""))
    text = response.body.decode("utf-8", "replace").strip().splitlines()
    first = text[0][:200] if text else "request failed"
    return ApiError(response.status, first or "request failed")
