"""``streamlease start``'s connection-profile flags: how to talk to a real feed.

The flags build the ``profile`` object of ``POST /streams`` (see :mod:`streamlease.profile`)::

    streamlease start feed wss://feed.example/ws \\
        --header 'Authorization=Bearer {secret:streamlease/feed#token}' \\
        --open-message @subscribe.json --seq-path data.u --resume open_message

``--profile`` gives the whole object (the JSON itself, or ``@FILE``); the other flags then
replace the keys they name; ``--open-message @FILE`` reads the message from a file. The API
checks the profile and names the field it refuses; here only the shape of the flags is
checked. Every stream of the command gets the profile, except lines of ``-f`` that carry their
own ``"profile"``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

from streamlease.errors import StreamleaseError

PROFILE_FLAGS: Final = ("profile", "header", "subprotocol", "open_message", "seq_path", "resume")


class ProfileArgsError(StreamleaseError):
    """A profile flag cannot be used as given; the message names it."""


def add_profile_flags(parser: argparse.ArgumentParser) -> None:
    """Add the profile flags to ``start``."""
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
        choices=("query", "open_message", "none"),
        help="how a reconnect asks for the next message (default: query)",
    )


def profile_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The profile the flags describe, or None when none was given.

    Raises :class:`ProfileArgsError` for a flag that cannot be read.
    """
    if all(getattr(args, name, None) is None for name in PROFILE_FLAGS):
        return None
    profile: dict[str, Any] = {}
    if args.profile is not None:
        loaded = _json(_value(args.profile, "--profile"), "--profile")
        if not isinstance(loaded, dict):
            raise ProfileArgsError("--profile must be a JSON object")
        profile.update(loaded)
    if args.header:
        headers = dict(profile.get("headers") or {})
        for raw in args.header:
            name, equals, value = raw.partition("=")
            if not equals or not name.strip():
                raise ProfileArgsError(f"--header {raw!r}: expected NAME=VALUE")
            headers[name.strip()] = value
        profile["headers"] = headers
    if args.subprotocol:
        profile["subprotocols"] = list(args.subprotocol)
    if args.open_message is not None:
        profile["open_message"] = _value(args.open_message, "--open-message").rstrip("\n")
    if args.seq_path is not None:
        profile["seq"] = args.seq_path
    if args.resume is not None:
        profile["resume"] = args.resume
    return profile


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
