"""Pagination tokens for ``GET /streams``: opaque to clients, unsigned, validated strictly.

A token is the base64url (unpadded) form of ``{"after": <stream id or null>, "state": <desired
state>, "v": 1}``: the ``by-state`` partition a listing is in and the last stream id it showed.
A listing by connection state carries its filter and the index position it needs besides:
``{"after", "connection_state": <connection state>, "owner": <the after stream's holder, null
with after>, "state", "v": 2}`` (version 1 of these carried an expiry: the position in an
index this release no longer has, so such a token is refused like any malformed one).

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

from lambdas.stream_listing import ListPosition
from streamlease.schema import STREAM_ID_PATTERN, ConnectionState, DesiredState

TOKEN_VERSION: Final = 1
CONNECTION_TOKEN_VERSION: Final = 2
MAX_TOKEN_CHARS: Final = 768
"""Longer than any token this module issues (a 128-character id gives about 220, about 560 in
a listing by connection state with a 200-character owner)."""
MAX_OWNER_CHARS: Final = 200

_FIELDS: Final = frozenset({"v", "state", "after"})
_CONNECTION_FIELDS: Final = _FIELDS | {"connection_state", "owner"}
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
        data["v"] = CONNECTION_TOKEN_VERSION
        data["connection_state"] = position.connection_state.value
        data["owner"] = position.after_owner
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
    wanted = CONNECTION_TOKEN_VERSION if "connection_state" in data else TOKEN_VERSION
    if type(version) is not int or version != wanted:
        raise malformed
    if not isinstance(state, str) or state not in _STATES:
        raise malformed
    if after is not None and (not isinstance(after, str) or not _STREAM_ID.fullmatch(after)):
        raise malformed
    position = ListPosition(DesiredState(state), after)
    if "connection_state" in data:
        position = _with_connection(position, data["connection_state"], data["owner"])
    if encode_token(position) != token:  # one spelling per position: no padding, no variants
        raise malformed
    return position


def _with_connection(position: ListPosition, connection: Any, owner: Any) -> ListPosition:
    """``position`` in a listing by connection state; the owner is an index key value (a
    worker id: printable, no spaces), null exactly when no stream was shown yet."""
    malformed = TokenInvalid(_MALFORMED)
    if not isinstance(connection, str) or connection not in _CONNECTION_STATES:
        raise malformed
    if position.after is None:
        if owner is not None:
            raise malformed
    elif not (
        isinstance(owner, str)
        and 0 < len(owner) <= MAX_OWNER_CHARS
        and all(c.isprintable() and not c.isspace() for c in owner)
    ):
        raise malformed
    return ListPosition(position.state, position.after, ConnectionState(connection), owner)
