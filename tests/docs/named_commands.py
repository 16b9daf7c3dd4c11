"""The ``streamlease …`` commands a text names, and what the CLI would not take of them: a page
or an API message that tells an operator what to do must name a command that does it now."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from typing import Final

from streamlease.cli.main import build_parser

NAMED: Final = re.compile(r"streamlease (?:[a-z][a-z-]*)(?: [^`,;()|\n]*)?")
"""``streamlease`` and a subcommand, with what follows up to the end of the phrase (a pipe,
a comma, a parenthesis, a code span's end)."""


FENCE: Final = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN: Final = re.compile(r"`([^`]+)`")


def named_commands(text: str) -> Iterator[str]:
    """Every ``streamlease COMMAND …`` in ``text`` (lines joined, so a command broken over two
    lines is one)."""
    for match in NAMED.finditer(" ".join(text.split())):
        yield match.group(0).strip()


def commands_of_page(markdown: str) -> Iterator[str]:
    """The commands a Markdown page names as code: in code spans and in fenced blocks (a
    block's lines one by one, a line continued by a backslash joined to the next)."""
    for block in FENCE.findall(markdown):
        for line in block.replace("\\\n", " ").splitlines():
            yield from named_commands(line.lstrip("$ "))
    for span in SPAN.findall(FENCE.sub("", markdown)):
        yield from named_commands(span)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_problem(command: str) -> str | None:
    """Why the CLI would not take ``command`` as named (an unknown subcommand or action, a flag
    the subcommand does not have), or None. Placeholders (``ID``, ``URL``, ``NAME``) and
    arguments left out are fine: a text may name a command without all of its arguments."""
    try:
        words = shlex.split(command)[1:]
    except ValueError:  # a quoted value cut at a comma: its words are enough for the flags
        words = command.split()[1:]
    parser: argparse.ArgumentParser = build_parser()
    path = ["streamlease"]
    while words and not words[0].startswith("-") and (subs := _subcommands(parser)):
        if words[0] not in subs:
            return f"{' '.join(path)} has no command {words[0]!r} ({command!r})"
        path.append(words[0])
        parser = subs[words.pop(0)]
    flags = {option for action in parser._actions for option in action.option_strings}
    for word in words:
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and flag not in flags:
            return f"{' '.join(path)} has no flag {flag} ({command!r})"
    return None
