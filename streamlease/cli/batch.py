"""Many streams in one command: what to act on, and the calls run a few at a time.

``streamlease start`` and ``stop`` (``resume``, ``rm`` too) take several streams as arguments
or as JSON lines from a file or stdin (``-f FILE``, ``-f -``): one object per line,
``{"id": ..., "ws_url": ...}`` (with ``"profile": {...}`` if it needs one) to start,
``{"id": ...}`` (other keys ignored, so the file that started streams stops them) or a bare id
to stop. Blank lines and lines starting with
``#`` are skipped. The calls share one client (keep-alive connections) and run
``concurrency`` at a time; results come back as each call finishes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Final

from streamlease.errors import StreamleaseError
from streamlease.schema import STREAM_ID_RULE, is_stream_id

DEFAULT_CONCURRENCY: Final = 8
MAX_CONCURRENCY: Final = 64
MAX_SHOWN_ID_CHARS: Final = 140


class InputError(StreamleaseError):
    """The list of streams cannot be read; the message names the line and what is wrong."""


@dataclass(frozen=True)
class Target:
    """One stream to act on; ``ws_url`` and ``profile`` (its connection profile, None for
    the default) only for ``start``."""

    id: str
    ws_url: str | None = None
    profile: dict[str, Any] | None = None


@dataclass(frozen=True)
class Outcome:
    """What one call did: ``verb`` (e.g. ``created``, ``already stopped``) and the stream, or
    the error that prevented it."""

    target: Target
    verb: str = ""
    stream: dict[str, Any] | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.error is None


def targets_from_arguments(values: Sequence[str], *, with_url: bool) -> list[Target]:
    """Targets from the command line: ``ID URL [ID URL ...]`` for start, ``ID [ID ...]`` else.

    Raises :class:`InputError` for an odd number of start arguments or an empty id.
    """
    if with_url:
        if len(values) % 2:
            raise InputError(
                "start takes pairs of a stream id and its URL: ID URL [ID URL ...]"
                f" (got {len(values)} argument{'s' if len(values) != 1 else ''})"
            )
        pairs = zip(values[::2], values[1::2], strict=True)
        found = [Target(stream_id, url) for stream_id, url in pairs]
    else:
        found = [Target(stream_id) for stream_id in values]
    for target in found:
        _check_id(target.id, "")
    return found


def targets_from_lines(lines: Iterable[str], *, with_url: bool, source: str) -> list[Target]:
    """Targets from JSON lines (bare ids too, when no URL is needed) read from ``source``.

    Raises :class:`InputError` naming ``source`` and the line number of the first bad line.
    """
    found = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}, line {number}: "
        if not text.startswith("{"):
            if with_url:
                raise InputError(where + 'expected a JSON object {"id": ..., "ws_url": ...}')
            found.append(Target(_check_id(text, where)))
            continue
        try:
            item = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}not JSON ({exc.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise InputError(where + 'expected a JSON object with a string "id"')
        url = item.get("ws_url")
        if not with_url:
            found.append(Target(_check_id(item["id"], where)))
            continue
        if not isinstance(url, str):
            raise InputError(where + 'expected a string "ws_url" next to the "id"')
        profile = item.get("profile")
        if profile is not None and not isinstance(profile, dict):
            raise InputError(where + '"profile" must be a JSON object')
        found.append(Target(_check_id(item["id"], where), url, profile))
    return found


def run_all(
    targets: Sequence[Target],
    call: Callable[[Target], Outcome],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Generator[Outcome, None, None]:
    """Run ``call`` for every target, at most ``concurrency`` at once; yields each outcome as
    it finishes. ``call`` turns failures into outcomes; anything it raises stops the run.

    Targets not yet sent when the caller stops iterating (Ctrl-C) are not sent.
    """
    pending = iter(targets)
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="api") as pool:
        running: set[Future[Outcome]] = set()
        try:
            while True:
                while len(running) < concurrency and (target := next(pending, None)):
                    running.add(pool.submit(call, target))
                if not running:
                    return
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
        finally:
            for future in running:
                future.cancel()


def _check_id(stream_id: str, where: str) -> str:
    if not stream_id:
        raise InputError(f"{where}a stream id must not be empty")
    if not is_stream_id(stream_id):
        raise InputError(
            f"{where}{stream_id[:MAX_SHOWN_ID_CHARS]!r} is not a stream id: {STREAM_ID_RULE}"
        )
    return stream_id


def check_stream_id(stream_id: str) -> str:
    """``stream_id`` if it is one; raises :class:`InputError` saying the rule otherwise."""
    return _check_id(stream_id, "")
