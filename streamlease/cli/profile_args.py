"""The connection-profile flags of ``streamlease start`` and ``set``: how to talk to a real feed.

The flags build the ``profile`` object of ``POST /streams`` and ``PATCH /streams/{id}`` (see
:mod:`streamlease.profile`)::

    streamlease start feed wss://feed.example/ws \\
        --header 'Authorization=Bearer {secret:streamlease/feed#token}' \\
        --open-message @subscribe.json --seq-path data.u --resume open_message

``--profile`` gives the whole object (the JSON itself, or ``@FILE``); the other flags then
replace the keys they name; ``--open-message @FILE`` reads the message from a file. The API
checks the profile and names the field it refuses; here only the shape of the flags is
checked. Every stream of the command gets the profile, except lines of ``-f`` that carry their
own ``"profile"``. ``set`` applies the flags to the stream's current profile (``--profile``
replaces it whole).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

from streamlease.errors import StreamleaseError

PROFILE_FLAGS: Final = (
    "profile",
    "header",
    "query",
    "subprotocol",
    "open_message",
    "seq_path",
    "resume",
)


class ProfileArgsError(StreamleaseError):
    """A profile flag cannot be used as given; the message names it."""


def add_profile_flags(parser: argparse.ArgumentParser) -> None:
    """Add the profile flags to ``start`` or ``set``."""
    group = parser.add_argument_group(
        "connection profile (how to talk to the upstream; default: JSON frames with an "
        "integer seq, resumed by the from_seq query parameter)"
    )
    group.add_argument(
        "--profile",
        metavar="JSON|@FILE",
        help="the whole profile as a JSON object; the flags below replace its keys",
    )
    group.add_argument(
        "--header",
        action="append",
        metavar="NAME=VALUE",
        help="a handshake header (repeatable); credentials only as a secret reference: "
        "'secret:NAME' or 'Bearer {secret:NAME}' (NAME#KEY for a JSON secret's key)",
    )
    group.add_argument(
        "--query",
        action="append",
        metavar="NAME=VALUE",
        help="a query parameter added on every connect (repeatable); {next_seq} or {last_seq} "
        "in VALUE carries the resume point (--query 'after={last_seq}': replay after it)",
    )
    group.add_argument(
        "--subprotocol", action="append", metavar="NAME", help="offer this subprotocol (repeatable)"
    )
    group.add_argument(
        "--open-message",
        metavar="TEXT|@FILE",
        help="a text frame sent after every (re)connect, e.g. a subscribe message; {next_seq} "
        "and {last_seq} are replaced by the resume point",
    )
    group.add_argument(
        "--seq-path",
        metavar="PATH|none",
        help="where each message's sequence number is (seq, sequence, data.u), or none: "
        "the worker numbers messages and a failover may lose or repeat what the feed "
        "does not replay",
    )
    group.add_argument(
        "--resume",
        choices=("query", "header", "open_message", "none"),
        help="where a reconnect states its resume point (default: query)",
    )


def has_profile_flags(args: argparse.Namespace) -> bool:
    """Whether any profile flag was given."""
    return any(getattr(args, name, None) is not None for name in PROFILE_FLAGS)


def profile_from_args(
    args: argparse.Namespace, base: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The profile the flags describe — applied to ``base`` (a stream's current profile)
    unless ``--profile`` replaces it — or None when no flag was given.

    Raises :class:`ProfileArgsError` for a flag that cannot be read.
    """
    if not has_profile_flags(args):
        return None
    profile: dict[str, Any] = dict(base or {})
    if args.profile is not None:
        loaded = _json(_value(args.profile, "--profile"), "--profile")
        if not isinstance(loaded, dict):
            raise ProfileArgsError("--profile must be a JSON object")
        profile = dict(loaded)
    for flag, key in (("header", "headers"), ("query", "query")):
        pairs = getattr(args, flag)
        if pairs:
            profile[key] = {**(profile.get(key) or {}), **_pairs(pairs, f"--{flag}")}
    if args.subprotocol:
        profile["subprotocols"] = list(args.subprotocol)
    if args.open_message is not None:
        profile.pop("open_messages", None)
        profile["open_message"] = _value(args.open_message, "--open-message").rstrip("\n")
    if args.seq_path is not None:
        profile["seq"] = args.seq_path
    if args.resume is not None:
        profile["resume"] = args.resume
    return profile


def _pairs(raws: list[str], flag: str) -> dict[str, str]:
    out = {}
    for raw in raws:
        name, equals, value = raw.partition("=")
        if not equals or not name.strip():
            raise ProfileArgsError(f"{flag} {raw!r}: expected NAME=VALUE")
        out[name.strip()] = value
    return out


def _value(text: str, flag: str) -> str:
    """``text``, or the contents of the file ``@path`` names."""
    if not text.startswith("@"):
        return text
    path = text[1:]
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ProfileArgsError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ProfileArgsError(f"{flag}: {path} is not UTF-8 text") from None


def _json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileArgsError(f"{flag}: not JSON ({exc.msg}, line {exc.lineno})") from None
