"""What picows reports, in the worker's terms: a refused handshake, an unwanted negotiation and
the close code picows sent, as websockets reports them (what the link classifies); and picows'
log records without what the upstream sent."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from picows import WSError, WSHandshakeError, WSTransport
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHandshake, InvalidStatus, NegotiationError
from websockets.http11 import Response


class WithoutData(logging.Handler):
    """picows' log records, passed on as their constant message only: the arguments of some
    carry what the upstream sent (a protocol error quotes a frame's first bytes, a bad close
    frame its payload), and upstream bodies are never logged. An exception is named by its
    type. A handler, not a filter: picows logs through a child logger per connection, which
    its parent's filters never see."""

    def emit(self, record: logging.LogRecord) -> None:
        record.args = None
        if record.exc_info:
            kind = record.exc_info[0]
            record.msg = f"{record.msg} ({getattr(kind, '__name__', 'error')})"
            record.exc_info = None
            record.exc_text = None
        logging.getLogger().handle(record)


PICOWS_LOGGER: Final = logging.getLogger("picows.upstream")
PICOWS_LOGGER.setLevel(logging.WARNING)  # picows logs every connect and disconnect at INFO
PICOWS_LOGGER.propagate = False  # what it logs goes through WithoutData only
PICOWS_LOGGER.addHandler(WithoutData())


def library_close_code(transport: WSTransport) -> int:
    """The close code picows sent when it failed the connection itself: its parser's (1009
    for a frame over ``max_size``, 1002 for a protocol error), or 1011 after an exception in
    our callbacks. Read once the disconnect is complete: the error is set, and waiting for it
    does not suspend."""
    waiter = transport.wait_disconnected()
    try:
        waiter.send(None)
    except WSError as exc:
        code = exc.args[0] if exc.args else 1002
        return int(getattr(code, "value", code))
    except StopIteration:
        return 1002
    except Exception:
        return 1011
    finally:
        waiter.close()
    return 1002


def refusal(exc: WSHandshakeError) -> InvalidHandshake:
    """picows' refused handshake as websockets reports it (what the link classifies)."""
    response = exc.response
    if response is None:
        return InvalidHandshake("the upstream's handshake answer is not HTTP/1.1")
    status = int(response.status)
    if status == 101:  # a 101 that is not a valid upgrade
        return InvalidHandshake("the upstream's 101 answer is not a valid upgrade")
    return InvalidStatus(
        Response(status, response.status.phrase, Headers(response.headers.items()))
    )


def negotiation_failure(headers: object, offered: Sequence[str]) -> NegotiationError | None:
    """What websockets refuses in an accepted handshake's answer: an extension (none is
    offered) or a subprotocol that was not offered, or more than one."""
    get = headers.getall  # type: ignore[attr-defined]
    if get("Sec-WebSocket-Extensions", []):
        return NegotiationError("no extensions supported")
    values = [v.strip() for value in get("Sec-WebSocket-Protocol", []) for v in value.split(",")]
    if not values:
        return None
    if len(values) > 1:
        return NegotiationError(f"multiple subprotocols: {', '.join(values)}")
    if values[0] not in offered:
        return NegotiationError(f"unsupported subprotocol: {values[0]}")
    return None
