"""The commands that change streams (``start``, ``stop``, ``resume``, ``rm``; ``set`` for
one), for one stream or many.

One stream prints what it did (``created s1: STARTED, ...``) or one error line. Many print a
line per stream as each call returns, failures on stderr, then a summary line. ``--json``
prints one document whatever the number of streams: ``{"results": [...], "summary": {...}}``,
each result in input order with its outcome (``created``, ``unchanged``, ``stopping``, ...) or
its error. A failure of the API for one stream does not stop the others; a request that gets
no answer at all (the API is down, credentials are missing) stops the batch, since the rest
would fail alike: every command here may be repeated safely. ``rm`` of a stream that is gone
already succeeds (``already_deleted``).

``stop --wait`` returns once each stream's holder has let go of it (``stopped``); ``rm --wait``
waits for that before deleting: every request goes first, then the streams still held are
waited for together (:mod:`streamlease.cli.waits`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

from streamlease.cli.batch import Outcome, Target, run_all
from streamlease.cli.client import ApiClient, ApiError
from streamlease.cli.render import stream_summary
from streamlease.cli.signing import CredentialsMissing
from streamlease.cli.transport import TransportError
from streamlease.cli.waits import (
    FAILED,
    RELEASING,
    Settle,
    Waiting,
    WaitTimedOut,
    settled,
)
from streamlease.errors import SourceError
from streamlease.schema import DesiredState

ErrorSink = Callable[..., None]
"""``error(message, code=..., **detail)``: one error line on stderr."""

NOT_SENT: Final = "not_sent"
WEBSOCKET_HINT: Final = (
    "{scheme}:// is not a WebSocket URL: use wss:// (or ws://, which the local stack allows)"
)
Call = Callable[[ApiClient, Target, bool], tuple[str, dict[str, Any] | None]]
"""One API call for one target, told whether ``--wait`` follows: (what happened, the stream
as last read). With ``--wait`` it may answer :data:`RELEASING`: settled later."""


@dataclass(frozen=True)
class Mutation:
    """A command that changes streams, and how it reads and reports them."""

    name: str
    help: str
    metavar: str
    arguments: str
    lines: str
    with_url: bool
    call: Call
    settle: Settle | None = None
    """Takes ``--wait``, and how to tell when a stream is done."""


def _start(client: ApiClient, target: Target, _: bool) -> tuple[str, dict[str, Any] | None]:
    assert target.ws_url is not None
    try:
        created, stream = client.create_stream(target.id, target.ws_url, target.profile)
    except ApiError as exc:
        raise _with_scheme_hint(exc, target.ws_url) from None
    return ("created" if created else "unchanged"), stream


def _stop(client: ApiClient, target: Target, _: bool) -> tuple[str, dict[str, Any] | None]:
    changed, stream = client.stop_stream(target.id)
    return ("stopping" if changed else "already_stopped"), stream


def _stopped(
    client: ApiClient, target: Target, verb: str, _: dict[str, Any] | None
) -> tuple[str, dict[str, Any] | None]:
    """``stop --wait``: done once nobody holds a live lease on the stream."""
    stream = client.get_stream(target.id)
    if stream.get("owner") and stream.get("lease_state") == "held":
        return RELEASING, stream
    return ("already_stopped" if verb == "already_stopped" else "stopped"), stream


def _resume(client: ApiClient, target: Target, _: bool) -> tuple[str, dict[str, Any] | None]:
    changed, stream = client.start_stream(target.id)
    return ("starting" if changed else "already_started"), stream


def _remove(client: ApiClient, target: Target, waits: bool) -> tuple[str, dict[str, Any] | None]:
    """DELETE; gone already is done too. With ``waits``, a stopped stream still held answers
    :data:`RELEASING` (a started one is refused at once)."""
    try:
        client.delete_stream(target.id)
    except ApiError as exc:
        if exc.status == 404:
            return "already_deleted", None
        if exc.status != 409 or not waits:
            raise
        try:
            stream = client.get_stream(target.id)
        except ApiError as gone:
            if gone.status == 404:
                return "already_deleted", None
            raise
        if stream.get("desired_state") == DesiredState.STARTED:
            raise
        return RELEASING, stream
    return "deleted", None


def _removed(
    client: ApiClient, target: Target, verb: str, stream: dict[str, Any] | None
) -> tuple[str, dict[str, Any] | None]:
    """``rm --wait``: DELETE again once the last try found the stream still held."""
    return _remove(client, target, True) if verb == RELEASING else (verb, stream)


MUTATIONS: Final = {
    m.name: m
    for m in (
        Mutation(
            "start",
            "create streams and start them",
            "ID URL",
            "a stream id and its upstream WebSocket URL (wss://…), as many pairs as you like",
            '{"id": ..., "ws_url": ...} (and "profile": {...} for its own profile)',
            True,
            _start,
        ),
        Mutation(
            "stop",
            "stop streams (each owner closes its stream within one heartbeat)",
            "ID",
            "stream ids",
            '{"id": ...} (other keys ignored) or a bare id',
            False,
            _stop,
            _stopped,
        ),
        Mutation(
            "resume",
            "start stopped streams again",
            "ID",
            "stream ids",
            '{"id": ...} (other keys ignored) or a bare id',
            False,
            _resume,
        ),
        Mutation(
            "rm",
            "delete stopped streams (one that is gone already counts as done)",
            "ID",
            "stream ids",
            '{"id": ...} (other keys ignored) or a bare id',
            False,
            _remove,
            _removed,
        ),
    )
}


def _change(client: ApiClient, target: Target, _: bool) -> tuple[str, dict[str, Any] | None]:
    """PATCH the URL and/or the whole profile (``None``: keep that one)."""
    changed, stream = client.change_stream(target.id, ws_url=target.ws_url, profile=target.profile)
    return ("changed" if changed else "unchanged"), stream


CHANGE: Final = Mutation(
    "set",
    "change a stream's URL or connection profile in place",
    "ID",
    "a stream id",
    "",
    False,
    _change,
)
"""``set``: one stream, reported as the other mutations report theirs."""

_LABELS: Final = {
    "unchanged": "exists, unchanged:",
    "already_stopped": "already stopped:",
    "already_started": "already started:",
}
_NOTES: Final = {"already_deleted": "(deleted before, or never created)"}


def words(verb: str) -> str:
    """A verb as people read it: ``already_stopped`` → ``already stopped``."""
    return verb.replace("_", " ")


def result_line(outcome: Outcome) -> str:
    """``created s1: STARTED, owner -, generation 1`` / ``already stopped: s1: ...``."""
    if outcome.stream is None:
        note = _NOTES.get(outcome.verb)
        return f"{words(outcome.verb)} {outcome.target.id}" + (f" {note}" if note else "")
    return f"{_LABELS.get(outcome.verb, outcome.verb)} {stream_summary(outcome.stream)}"


def run_mutation(
    mutation: Mutation,
    client: ApiClient,
    targets: Sequence[Target],
    *,
    single: bool,
    concurrency: int,
    out: TextIO,
    error: ErrorSink,
    as_json: bool,
    waiting: Waiting | None = None,
) -> int:
    """Run ``mutation`` for every target; returns the exit code (1 if any failed).

    ``single``: one stream named on the command line; without ``as_json`` its errors
    propagate to the caller, which reports them as for any other command. ``waiting``: wait
    for holders to let go (``--wait``; only for mutations that take it).
    """
    if single and not as_json:
        only = next(_outcomes(mutation, client, targets, concurrency, waiting))
        if only.error is not None:
            raise only.error
        out.write(result_line(only) + "\n")
        _warn(only, error)
        return 0

    started = time.monotonic()
    outcomes: dict[int, Outcome] = {}
    halted: Outcome | None = None
    results = _outcomes(mutation, client, targets, concurrency, waiting)
    try:
        for outcome in results:
            outcomes[id(outcome.target)] = outcome
            if not as_json:
                _report(mutation, outcome, out, error)
            if isinstance(outcome.error, TransportError | CredentialsMissing):
                halted = outcome
                break
    finally:
        results.close()
    ordered = [outcomes.get(id(t)) or Outcome(t, NOT_SENT) for t in targets]
    counts = Counter(_status(o) for o in ordered)
    seconds = time.monotonic() - started
    if as_json:
        document = results_document([_as_data(o) for o in ordered], counts, seconds)
        out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        if halted is not None and counts[NOT_SENT]:
            error(
                f"{mutation.name}: stopped: {halted.error}; {counts[NOT_SENT]} {words(NOT_SENT)} "
                f"(the command may be repeated safely)",
                code="halted",
            )
        out.write(summary_line(mutation.name, len(ordered), counts, seconds) + "\n")
    out.flush()
    return 0 if counts[FAILED] == 0 and counts[NOT_SENT] == 0 else 1


def results_document(
    results: Sequence[dict[str, Any]], counts: Mapping[str, int], seconds: float
) -> dict[str, Any]:
    """What ``--json`` prints for any command that changes something (``start``, ``stop``,
    ``set``, ``rm``, ``secret put``, ...): ``{"results": [{"id", "result", ...} or {"id",
    "error"}, ...], "summary": {"total", "seconds", <result>: <count>, ...}}``."""
    return {
        "results": list(results),
        "summary": {"total": len(results), "seconds": round(seconds, 3), **counts},
    }


def summary_line(name: str, total: int, counts: Counter[str], seconds: float) -> str:
    """``stop: 3 streams in 0.2 s: 2 stopping, 1 already stopped, 0 failed``."""
    done = [f"{n} {words(verb)}" for verb, n in counts.items() if verb not in (FAILED, NOT_SENT)]
    done.append(f"{counts[FAILED]} {FAILED}")
    if counts[NOT_SENT]:
        done.append(f"{counts[NOT_SENT]} {words(NOT_SENT)}")
    noun = "stream" if total == 1 else "streams"
    return f"{name}: {total} {noun} in {seconds:.1f} s: {', '.join(done)}"


def _outcomes(
    mutation: Mutation,
    client: ApiClient,
    targets: Sequence[Target],
    concurrency: int,
    waiting: Waiting | None,
) -> Generator[Outcome, None, None]:
    """Every target's outcome as it is settled: the calls ``concurrency`` at a time, then,
    under ``--wait``, the streams still held looked at together, round after round, each
    until it is let go or its own ``--wait-timeout`` has passed (a stream waited for never
    holds back the calls or the waits of the others)."""
    settle = mutation.settle if waiting is not None else None
    pending: list[tuple[Outcome, float]] = []
    calls = run_all(targets, _safely(mutation, client, settle is not None), concurrency=concurrency)
    try:
        for outcome in calls:
            if settle is None or outcome.error is not None:
                yield outcome
            else:
                assert waiting is not None
                pending.append((outcome, waiting.clock() + waiting.timeout_seconds))
    finally:
        calls.close()
    if settle is not None and waiting is not None:
        yield from settled(settle, client, pending, concurrency, waiting)


def _safely(mutation: Mutation, client: ApiClient, waits: bool) -> Callable[[Target], Outcome]:
    def call(target: Target) -> Outcome:
        try:
            verb, stream = mutation.call(client, target, waits)
        except (ApiError, TransportError, CredentialsMissing) as exc:
            return Outcome(target, FAILED, error=exc)
        return Outcome(target, verb, stream)

    return call


def _report(mutation: Mutation, outcome: Outcome, out: TextIO, error: ErrorSink) -> None:
    if outcome.error is None:
        out.write(result_line(outcome) + "\n")
        out.flush()
        _warn(outcome, error)
    else:
        error(f"{mutation.name} {outcome.target.id}: {outcome.error}", code="failed")


def _warn(outcome: Outcome, error: ErrorSink) -> None:
    """The API's warnings about a stream it accepted (a secret that does not exist yet), one
    stderr line each; ``--json`` carries them in the stream's ``warnings``."""
    for warning in (outcome.stream or {}).get("warnings") or ():
        error(f"{outcome.target.id}: {warning}", code="warning", label="warning")


def _status(outcome: Outcome) -> str:
    return FAILED if outcome.error is not None else outcome.verb


def _as_data(outcome: Outcome) -> dict[str, Any]:
    data: dict[str, Any] = {"id": outcome.target.id}
    if outcome.error is not None:
        data["error"] = error_data(outcome.error)
    elif outcome.verb == NOT_SENT:
        data["error"] = {"code": NOT_SENT, "message": "not sent: an earlier request got no answer"}
    else:
        data["result"] = outcome.verb
        if outcome.stream is not None:
            data["stream"] = outcome.stream
    return data


def error_data(exc: Exception) -> dict[str, Any]:
    """An error as the ``error`` object of ``--json`` output."""
    if isinstance(exc, ApiError):
        return {
            "code": exc.code or "api_error",
            "message": exc.message,
            "status": exc.status,
            "field": exc.field,
        }
    if isinstance(exc, SourceError):
        code = "credentials" if exc.code == "NoCredentials" else "source"
        return {"code": code, "aws_code": exc.code, "message": str(exc)}
    if isinstance(exc, WaitTimedOut):
        code = "wait_timeout"
    else:
        code = "unreachable" if isinstance(exc, TransportError) else "credentials"
    return {"code": code, "message": str(exc)}


def _with_scheme_hint(exc: ApiError, ws_url: str) -> ApiError:
    """The API's refusal of an ``http(s)://`` URL, with what a WebSocket URL looks like."""
    try:
        scheme = urlsplit(ws_url).scheme.lower()
    except ValueError:
        return exc
    if exc.field != "ws_url" or scheme not in ("http", "https"):
        return exc
    hint = WEBSOCKET_HINT.format(scheme=scheme)
    return ApiError(exc.status, f"{exc.message}; {hint}", code=exc.code, field=exc.field)
