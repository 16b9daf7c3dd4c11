"""Pagination tokens: opaque, signed, bound to their filter; anything else is TokenInvalid."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambdas.pagination import TokenInvalid, decode_token, encode_token, signing_key
from streamlease.settings import Settings

KEY = signing_key(Settings(next_token_key="secret"))
START = {"Pk": "CONN#s42"}


def test_round_trip() -> None:
    """A token decodes to the start key it was made from."""
    assert decode_token(encode_token(START, "STARTED", KEY), "STARTED", KEY) == START


def test_token_is_bound_to_its_filter() -> None:
    """A token made for one state filter is refused under another (or none)."""
    token = encode_token(START, "STARTED", KEY)
    with pytest.raises(TokenInvalid, match="another filter"):
        decode_token(token, None, KEY)


def test_token_is_bound_to_its_key() -> None:
    """Another deployment's (or a guessed) key does not verify."""
    other = signing_key(Settings(next_token_key="other"))
    with pytest.raises(TokenInvalid, match="not issued"):
        decode_token(encode_token(START, None, KEY), None, other)


def test_derived_key_depends_on_the_table() -> None:
    """Without next_token_key the key is derived from the table name."""
    assert signing_key(Settings(table_name="a")) != signing_key(Settings(table_name="b"))


def test_signed_token_must_still_hold_a_stream_key() -> None:
    """Even a correctly signed token must carry a stream key (worker keys are refused)."""
    token = encode_token({"Pk": "WORKER#w1"}, None, KEY)
    with pytest.raises(TokenInvalid):
        decode_token(token, None, KEY)


@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes(text: str) -> None:
    """Whatever a client sends, decoding raises TokenInvalid or returns a stream key."""
    try:
        start = decode_token(text, None, KEY)
    except TokenInvalid:
        return
    assert start["Pk"].startswith("CONN#")
