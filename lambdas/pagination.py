"""Pagination tokens for ``GET /streams``: opaque to clients, unsigned, validated strictly.

A token is the base64url (unpadded) form of ``{"after": <stream id or null>, "state": <desired
state>, "v": 1}``: the ``by-state`` partition a listing is in and the last stream id it showed.
A listing by connection state carries its filter and the index position it needs besides:
``{"after", "connection_state": <connection state>, "expiry": <the after stream's
lease_expires_at_ms, null with after>, "state", "v": 1}``.

Why not signed: a token only chooses where a listing starts, and anyone who may call
``GET /streams`` may list from any place anyway, by paging there. A forged token therefore
gains nothing; it reaches no other table, no worker item and no stream the caller could not
list. Signing would have needed a secret provisioned, rotated and read by every Lambda, and the
key derived from the table name that stood in for one protected nothing. What matters is that
a token cannot make the API send DynamoDB anything but a well-formed query, so decoding is
strict: only the exact text this module would issue for a known state and a valid stream id is
accepted, the state must be the one the request filters on and the connection state exactly
the one it filters on (a token of another listing would page through the wrong one). Anything
else is :class:`TokenInvalid`, which the API answers with a 400 naming ``next_token``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Final

from lambdas.api_models import STREAM_ID_PATTERN
from lambdas.stream_listing import ListPosition
from streamlease.schema import SESSION_HELD_MS, ConnectionState, DesiredState

TOKEN_VERSION: Final = 1
MAX_TOKEN_CHARS: Final = 512
"""Longer than any token this module issues (a 128-character id gives about 220, 300 in a
listing by connection state)."""

_FIELDS: Final = frozenset({"v", "state", "after"})
_CONNECTION_FIELDS: Final = _FIELDS | {"connection_state", "expiry"}
_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]+")
_STREAM_ID: Final = re.compile(STREAM_ID_PATTERN)
_STATES: Final = frozenset(s.value for s in DesiredState)
_CONNECTION_STATES: Final = frozenset(s.value for s in ConnectionState)
_MALFORMED: Final = "next_token is malformed; pass back the next_token of a page as is"


class TokenInvalid(ValueError):
    """The token is malformed, or belongs to a listing with another filter."""


def encode_token(position: ListPosition) -> str:
    """The token for a listing that goes on at ``position``."""
    data: dict[str, Any] = {
        "v": TOKEN_VERSION,
        "state": position.state.value,
        "after": position.after,
    }
    if position.connection_state is not None:
        data["connection_state"] = position.connection_state.value
        data["expiry"] = position.after_expiry
    payload = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode("ascii")


def decode_token(
    token: str,
    state_filter: DesiredState | None,
    connection_filter: ConnectionState | None = None,
) -> ListPosition:
    """Where the listing of ``token`` goes on. Raises :class:`TokenInvalid` for anything but a
    token :func:`encode_token` made, for one whose state is not ``state_filter`` (when the
    request filters by state) and for one whose connection state is not ``connection_filter``
    (None: the request does not filter by connection state, nor may its token)."""
    position = _parse(token)
    if state_filter is not None and position.state is not state_filter:
        raise TokenInvalid("next_token belongs to a listing with another state filter")
    if position.connection_state is not connection_filter:
        raise TokenInvalid("next_token belongs to a listing with another connection_state filter")
    return position


def _parse(token: str) -> ListPosition:
    malformed = TokenInvalid(_MALFORMED)
    if len(token) > MAX_TOKEN_CHARS or not _BASE64URL.fullmatch(token):
        raise malformed
    try:
        data: Any = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise malformed from None
    if not isinstance(data, dict) or set(data) not in (_FIELDS, _CONNECTION_FIELDS):
        raise malformed
    version, state, after = data["v"], data["state"], data["after"]
    if type(version) is not int or version != TOKEN_VERSION:
        raise malformed
    if not isinstance(state, str) or state not in _STATES:
        raise malformed
    if after is not None and (not isinstance(after, str) or not _STREAM_ID.fullmatch(after)):
        raise malformed
    position = ListPosition(DesiredState(state), after)
    if "connection_state" in data:
        position = _with_connection(position, data["connection_state"], data["expiry"])
    if encode_token(position) != token:  # one spelling per position: no padding, no variants
        raise malformed
    return position


def _with_connection(position: ListPosition, connection: Any, expiry: Any) -> ListPosition:
    """``position`` in a listing by connection state; the expiry is an index key value, null
    exactly when no stream was shown yet in the partition."""
    malformed = TokenInvalid(_MALFORMED)
    if not isinstance(connection, str) or connection not in _CONNECTION_STATES:
        raise malformed
    if position.after is None:
        if expiry is not None:
            raise malformed
    elif type(expiry) is not int or not 0 <= expiry <= SESSION_HELD_MS:
        raise malformed
    return ListPosition(position.state, position.after, ConnectionState(connection), expiry)
