"""Property: no request, however malformed, makes the API answer 5xx (or anything but JSON)."""

from __future__ import annotations

import json
import string
from typing import Any

from control_plane_support import Api
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamlease.schema import STREAM_ID_PATTERN

SEGMENTS = st.one_of(
    st.sampled_from(["streams", "workers", "stop", "start", "", "s1", "%3A", "%2F", ".."]),
    st.from_regex(STREAM_ID_PATTERN, fullmatch=True),
    st.text(alphabet=string.printable + "é☃\x00", max_size=20),
)
PATHS = st.lists(SEGMENTS, min_size=0, max_size=4).map(lambda parts: "/" + "/".join(parts))
FIXED_PATHS = st.sampled_from(
    ["/streams", "/streams/s1", "/streams/s1/stop", "/streams/s1/start", "/workers"]
)
METHODS = st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"])
TEXT = st.text(max_size=60)
URLS = st.one_of(
    TEXT,
    st.from_regex(r"\Awss?://[a-z0-9.:\[\]@%#?/-]{0,40}\Z"),
    st.sampled_from(
        ["wss://feed.example.com/x", "wss://169.254.169.254/", "wss://0x7f.1/", "ws://[::1]/"]
    ),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)
OBJECT_BODIES = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.from_regex(STREAM_ID_PATTERN, fullmatch=True), JSON_VALUES),
        "ws_url": st.one_of(URLS, JSON_VALUES),
        "extra": JSON_VALUES,
    },
).map(json.dumps)
BODIES = st.one_of(st.none(), TEXT, OBJECT_BODIES, JSON_VALUES.map(json.dumps))
QUERIES = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["state", "limit", "next_token", "x"]) | TEXT,
        st.one_of(TEXT, st.sampled_from(["STARTED", "STOPPED", "0", "1", "100", "1" * 30])),
        max_size=3,
    ),
)
CONTENT_TYPES = st.sampled_from(
    [None, "application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/x"]
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=METHODS,
    path=st.one_of(PATHS, FIXED_PATHS),
    body=BODIES,
    query=QUERIES,
    content_type=CONTENT_TYPES,
    base64_body=st.booleans(),
)
def test_no_request_gets_a_server_error(
    api: Api,
    method: str,
    path: str,
    body: str | None,
    query: dict[str, str] | None,
    content_type: str | None,
    base64_body: bool,
) -> None:
    """Whatever arrives, the answer is < 500, and every error is the documented JSON shape."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    result = api(
        method,
        path,
        raw_body=body,
        query=query or None,
        headers=headers,
        base64_body=base64_body and body is not None,
    )
    assert result.status < 500, (result.status, result.body)
    if result.status >= 400:
        error: Any = result.error
        assert set(error) == {"code", "message", "field"}
        assert isinstance(error["message"], str) and error["message"]
