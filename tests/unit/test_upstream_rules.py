"""Pure parts of the upstream connection: resume URLs and how failures are classified."""

from __future__ import annotations

import socket
import ssl
from types import SimpleNamespace
from typing import Any

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.frames import Close
from websockets.http11 import Response

from worker.stream.connection import describe_close, describe_connect_error, with_query
from worker.stream.transport import CloseBy
from worker.stream.websocket import closed_from

SECRET = "token=s3cr3t"


def _status(code: int) -> InvalidStatus:
    return InvalidStatus(Response(code, "x", Headers(), b"body with s3cr3t"))


# --- resume parameter ------------------------------------------------------------------------


def test_the_resume_parameter_is_added_to_a_resource_without_query() -> None:
    """A bare path gains ``?from_seq=n``."""
    assert with_query("/s1", [("from_seq", "42")]) == "/s1?from_seq=42"


def test_a_parameter_replaces_an_existing_one_and_keeps_the_rest_byte_for_byte() -> None:
    """Other parameters keep their order and their exact encoding; the old value goes."""
    resource = "/s?a=b%20c&from_seq=3&x&d=%2F"
    assert with_query(resource, [("from_seq", "9")]) == "/s?a=b%20c&x&d=%2F&from_seq=9"


def test_a_parameter_spelled_with_percent_escapes_is_still_replaced() -> None:
    """``from%5Fseq`` is the same parameter name as ``from_seq``."""
    assert with_query("/s?from%5Fseq=1", [("from_seq", "5")]) == "/s?from_seq=5"


def test_several_parameters_are_added_in_order_and_values_escaped() -> None:
    """An exclusive resume with a channel: both in order; a space cannot split the query."""
    params = [("after", "7"), ("channel", "a b&c")]
    assert with_query("/s?k=v", params) == "/s?k=v&after=7&channel=a%20b%26c"


def test_no_parameters_leave_the_resource_alone() -> None:
    """An upstream without replay gets the URL as stored."""
    assert with_query("/s?k=v", []) == "/s?k=v"


# --- handshake failures ----------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451])
def test_4xx_at_handshake_is_fatal(status: int) -> None:
    """The upstream refused the stream: retrying would get the same answer."""
    failure = describe_connect_error(_status(status))
    assert failure.fatal
    assert failure.status == status


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_transient_statuses_at_handshake_are_retried(status: int) -> None:
    """5xx and the transient 4xx (timeout, too early, too many requests) are retried."""
    failure = describe_connect_error(_status(status))
    assert not failure.fatal
    assert failure.status == status


@pytest.mark.parametrize("status", [200, 301, 302, 307, 308])
def test_redirects_and_non_upgrade_answers_are_fatal(status: int) -> None:
    """Redirects are never followed; a 200 means the URL is not a WebSocket endpoint."""
    assert describe_connect_error(_status(status)).fatal


@pytest.mark.parametrize(
    "exc",
    [
        TimeoutError(),
        ConnectionRefusedError(111, "Connection refused"),
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        ssl.SSLCertVerificationError("certificate verify failed"),
        OSError(113, "No route to host"),
    ],
)
def test_network_errors_are_retried(exc: BaseException) -> None:
    """Timeouts, refused connections, DNS and TLS failures may heal: retry with backoff."""
    failure = describe_connect_error(exc)
    assert not failure.fatal
    assert failure.message


def test_failure_messages_never_repeat_upstream_text_or_urls() -> None:
    """The message is ours: no response body, no URL, no query string."""
    exc = _status(403)
    exc.add_note(f"wss://up.example/s?{SECRET}")
    for failure in (
        describe_connect_error(exc),
        describe_connect_error(OSError(f"wss://up.example/s?{SECRET}")),
    ):
        assert "s3cr3t" not in failure.message


# --- closed connections ----------------------------------------------------------------------


def judged(received: Close | None, sent: Close | None, received_first: bool | None = None) -> Any:
    """How a connection that ended with these close frames is judged (what the protocol
    recorded -> :func:`closed_from` -> :func:`describe_close`)."""
    protocol = SimpleNamespace(
        close_rcvd=received, close_sent=sent, close_rcvd_then_sent=received_first
    )
    return describe_close(closed_from(protocol))  # type: ignore[arg-type]


def test_normal_close_from_upstream_ends_the_stream() -> None:
    """1000 received from the upstream: the stream is over (``fatal`` means ended)."""
    failure = judged(Close(1000, "bye s3cr3t"), Close(1000, ""), True)
    assert failure.fatal
    assert failure.close_code == 1000
    assert "s3cr3t" not in failure.message


def test_going_away_from_upstream_is_retried() -> None:
    """1001: the upstream server is restarting or going down, not finished with the stream."""
    failure = judged(Close(1001, ""), Close(1001, ""), True)
    assert not failure.fatal
    assert failure.close_code == 1001


@pytest.mark.parametrize("code", [1002, 1008, 1011, 1012, 1013, 1014, 4000])
def test_other_close_codes_from_upstream_are_retried(code: int) -> None:
    """Restart, try-again-later, internal errors and application codes: reconnect."""
    failure = judged(Close(code, "s3cr3t"), None)
    assert not failure.fatal
    assert failure.close_code == code
    assert "s3cr3t" not in failure.message


def test_connection_lost_without_close_frame_is_retried_as_1006() -> None:
    """An abrupt TCP close is the classic flapping upstream."""
    closed = closed_from(SimpleNamespace(close_rcvd=None, close_sent=None))  # type: ignore[arg-type]
    assert (closed.code, closed.by) == (1006, CloseBy.NETWORK)
    failure = describe_close(closed)
    assert not failure.fatal
    assert failure.close_code == 1006


def test_a_close_we_started_is_judged_by_our_code_not_the_echo() -> None:
    """Our 1009 (message too big) echoed by the upstream is a failure to retry, not an end."""
    failure = judged(Close(1009, ""), Close(1009, "too big"), False)
    assert not failure.fatal
    assert "over" in failure.message


def test_upstream_ending_after_our_ping_timeout_close_is_still_a_retry() -> None:
    """We closed first (1011); an upstream answering 1000 does not turn that into an end."""
    failure = judged(Close(1000, ""), Close(1011, ""), False)
    assert not failure.fatal


def test_keepalive_timeout_is_retried_and_named() -> None:
    """The keepalive closes with 1011 when pings go unanswered; the message says so."""
    failure = judged(None, Close(1011, "keepalive ping timeout"))
    assert not failure.fatal
    assert "keepalive" in failure.message
