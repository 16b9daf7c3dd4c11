"""Opaque, signed pagination tokens for ``GET /streams``.

A token carries the listing's DynamoDB start key and the filter it was issued for, signed with
HMAC-SHA256, so a client can neither forge a start key nor reuse a token under another filter.
Anything that does not verify is a client error, never a crash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any, Final

from streamlease.schema import PK, STREAM_PREFIX
from streamlease.settings import Settings

TOKEN_VERSION: Final = 1
MAX_TOKEN_CHARS: Final = 2048
_MAC_BYTES: Final = 16


class TokenInvalid(ValueError):
    """The token is malformed, forged, or belongs to another query."""


def signing_key(settings: Settings) -> bytes:
    """The HMAC key: ``next_token_key`` if set, else one derived from the table name.

    The derived key only stops accidental or casual tampering; set ``next_token_key`` (a secret)
    where clients must not be able to mint tokens.
    """
    secret = settings.next_token_key or f"streamlease-next-token:{settings.table_name}"
    return hashlib.sha256(secret.encode()).digest()


def encode_token(start_key: Mapping[str, str], query_filter: str | None, key: bytes) -> str:
    """A token resuming after ``start_key`` for a listing filtered by ``query_filter``."""
    payload = json.dumps(
        {"v": TOKEN_VERSION, "k": dict(start_key), "f": query_filter},
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    mac = hmac.new(key, payload, hashlib.sha256).digest()[:_MAC_BYTES]
    return f"{_b64(payload)}.{_b64(mac)}"


def decode_token(token: str, query_filter: str | None, key: bytes) -> dict[str, str]:
    """The start key inside ``token``. Raises :class:`TokenInvalid` for anything else.

    The token must verify, be of this version, carry a stream key, and have been issued for
    the same ``query_filter``.
    """
    if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise TokenInvalid("next_token is malformed")
    body, mac = token.split(".")
    try:
        payload = _unb64(body)
        given = _unb64(mac)
    except (binascii.Error, ValueError):
        raise TokenInvalid("next_token is malformed") from None
    expected = hmac.new(key, payload, hashlib.sha256).digest()[:_MAC_BYTES]
    if not hmac.compare_digest(given, expected):
        raise TokenInvalid("next_token was not issued by this API")
    try:
        data: Any = json.loads(payload)
    except ValueError:
        raise TokenInvalid("next_token is malformed") from None
    start = data.get("k") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("v") != TOKEN_VERSION or not isinstance(start, dict):
        raise TokenInvalid("next_token is malformed")
    if data.get("f") != query_filter:
        raise TokenInvalid("next_token belongs to a listing with another filter")
    pk = start.get(PK)
    if set(start) != {PK} or not isinstance(pk, str) or not pk.startswith(STREAM_PREFIX):
        raise TokenInvalid("next_token is malformed")
    return {PK: pk}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not ASCII")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
