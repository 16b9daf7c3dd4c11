"""``streamlease``: the operator's command line for the streamlease API.

Exit codes: 0 success, 1 the API refused (any stream of a batch included) or could not be
reached (``consume``: the sink stream could not be read), 2 a usage or configuration error,
130 interrupted. An error is one line on stderr;
with ``--json`` that line is a JSON object ``{"error": {...}}`` and every result on stdout is
JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any, Final, NoReturn, TextIO

from streamlease.cli.batch import (
    DEFAULT_CONCURRENCY,
    MAX_CONCURRENCY,
    InputError,
    Target,
    check_stream_id,
    targets_from_arguments,
    targets_from_lines,
)
from streamlease.cli.client import DEFAULT_TIMEOUT_SECONDS, ApiClient, ApiError
from streamlease.cli.config import CliConfig, read_config
from streamlease.cli.consume import ConsumeUsageError, run_consume
from streamlease.cli.consume import add_parser as add_consume_parser
from streamlease.cli.mutations import (
    CHANGE,
    MUTATIONS,
    error_data,
    results_document,
    run_mutation,
)
from streamlease.cli.profile_args import (
    ProfileArgsError,
    add_profile_flags,
    has_profile_flags,
    profile_from_args,
)
from streamlease.cli.render import (
    WORKER_HEADERS,
    now_ms,
    table,
    trouble_of,
    trouble_summary,
    worker_row,
)
from streamlease.cli.secret import (
    SecretError,
    add_parser,
    check_secret_name,
    put_secret,
    read_value,
    store_for,
)
from streamlease.cli.signing import CredentialsMissing
from streamlease.cli.stream_text import stream_detail, stream_lines
from streamlease.cli.target import TargetError, target_for
from streamlease.cli.transport import HttpTransport, Transport, TransportError
from streamlease.cli.waits import DEFAULT_WAIT_SECONDS, Waiting, WaitTimedOut
from streamlease.cli.watch import watch
from streamlease.errors import ConfigError, SourceError, StreamleaseError
from streamlease.schema import ConnectionState
from streamlease.settings import env_name

PROG: Final = "streamlease"
EXIT_OK: Final = 0
EXIT_API: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


class UsageError(StreamleaseError):
    """The command line is malformed; the message says what to change."""


def version() -> str:
    """The installed distribution's version (``unknown`` when run from a bare checkout)."""
    try:
        return metadata.version("streamlease")
    except metadata.PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``UsageError``) instead of usage text."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> _Parser:
    """The argument parser (global options are accepted before or after the command)."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--api",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"API base URL (default: ${env_name('api_url')}, else the local stack)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="JSON output; errors too, as one JSON line on stderr",
    )
    common.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=argparse.SUPPRESS,
        help=f"per-request timeout in seconds (default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    parser = _Parser(
        prog=PROG,
        parents=[common],
        description="Start, stop and inspect streams; watch who owns them.",
        epilog="Against an execute-api URL requests are SigV4-signed with your AWS credentials. "
        "HTTPS_PROXY, HTTP_PROXY and NO_PROXY are honoured (loopback always goes direct).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[common], help=help_text, description=help_text)

    for name, mutation in MUTATIONS.items():
        sub = command(name, mutation.help)
        sub.add_argument("targets", nargs="*", metavar=mutation.metavar, help=mutation.arguments)
        sub.add_argument(
            "-f",
            "--file",
            metavar="FILE",
            help=f"also read streams from FILE ('-': stdin), one per line: {mutation.lines}",
        )
        sub.add_argument(
            "--concurrency",
            type=int,
            default=DEFAULT_CONCURRENCY,
            metavar="N",
            help=f"requests in flight at once (1 to {MAX_CONCURRENCY}, default "
            f"{DEFAULT_CONCURRENCY})",
        )
        if mutation.with_url:
            add_profile_flags(sub)
        if mutation.settle is not None:
            sub.add_argument(
                "--wait",
                action="store_true",
                help="return once each stream's holder has let go of it (rm: then delete it)",
            )
            sub.add_argument(
                "--wait-timeout",
                type=float,
                default=DEFAULT_WAIT_SECONDS,
                metavar="SECONDS",
                help=f"how long --wait waits per stream (default {DEFAULT_WAIT_SECONDS:g})",
            )
    change = command(
        "set",
        "change a stream's URL or connection profile in place (it keeps its last seq; the "
        "holder reconnects with the new settings)",
    )
    change.add_argument("id", help="stream id")
    change.add_argument("--url", metavar="URL", help="the new upstream WebSocket URL")
    add_profile_flags(change)
    command("get", "show one stream").add_argument("id", help="stream id")
    ls = command("ls", "list streams")
    ls.add_argument(
        "--state", type=str.upper, choices=("STARTED", "STOPPED"), help="only streams in this state"
    )
    ls.add_argument(
        "--connection-state",
        type=str.lower,
        choices=[state.value for state in ConnectionState],
        metavar="STATE",
        help="only streams whose connection is in this state: "
        + ", ".join(state.value for state in ConnectionState),
    )
    command("workers", "list live workers")
    live = command("watch", "live view of streams and workers (Ctrl-C to leave)")
    live.add_argument("--once", action="store_true", help="print one frame and exit")
    live.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="refresh period (default 1)"
    )
    add_parser(commands, common)
    add_consume_parser(commands, common)
    return parser


@dataclass
class Streams:
    """Where the CLI writes and reads, and how."""

    out: TextIO
    err: TextIO
    stdin: TextIO
    as_json: bool

    def error(self, message: str, *, code: str, label: str = "") -> None:
        """One line on stderr: ``streamlease: [label: ]message`` or, with ``--json``, a JSON
        object ``{"error": {"code": ..., "message": ...}}``."""
        self._line({"code": code, "message": message}, label)

    def fail(self, exc: Exception, message: str | None = None) -> None:
        """:meth:`error` for a failed call: the API's status, code and field included."""
        body = error_data(exc)
        if message is not None:
            body["message"] = message
        elif not self.as_json:
            body["message"] = str(exc)
        self._line(body)

    def _line(self, body: dict[str, Any], label: str = "") -> None:
        if self.as_json:
            line = json.dumps({"error": body}, separators=(",", ":"), sort_keys=True)
        else:
            line = f"{PROG}: {label + ': ' if label else ''}{_one_line(str(body['message']))}"
        self.err.write(line + "\n")
        self.err.flush()


def main(
    argv: Sequence[str] | None = None,
    *,
    transport: Transport | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    environ: dict[str, str] | None = None,
) -> int:
    """Run the CLI; returns the exit code. ``transport``, the streams and ``environ`` replace
    the real ones (tests)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    io = Streams(
        out=stdout or sys.stdout,
        err=stderr or sys.stderr,
        stdin=stdin or sys.stdin,
        as_json="--json" in args_list[: _end_of_options(args_list)],
    )
    try:
        with contextlib.redirect_stdout(io.out), contextlib.redirect_stderr(io.err):
            args = build_parser().parse_args(args_list)
    except SystemExit as exc:  # --help or --version has been printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except UsageError as exc:
        io.error(str(exc), code="usage", label="error")
        return EXIT_USAGE
    try:
        config = read_config(environ)
    except ConfigError as exc:
        io.error(str(exc), code="configuration", label="configuration error")
        return EXIT_USAGE
    url = config.api_url(getattr(args, "api", None))
    try:
        client = _client(args, url, config, transport)
        return _run(args, client, config, io)
    except (UsageError, ConsumeUsageError) as exc:
        io.error(str(exc), code="usage", label="error")
        return EXIT_USAGE
    except ApiError as exc:
        io.fail(exc)
    except TransportError as exc:
        hint = " (is `make run` running?)" if url == config.local_api_url else ""
        io.fail(exc, f"cannot reach the API at {url}: {exc}{hint}")
    except (CredentialsMissing, WaitTimedOut, SecretError, TargetError, SourceError) as exc:
        io.fail(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `streamlease ls | head`: the reader left, nothing to say
        _silence(io.out)
    return EXIT_API


def _client(
    args: argparse.Namespace, url: str, config: CliConfig, transport: Transport | None
) -> ApiClient:
    timeout = getattr(args, "timeout", DEFAULT_TIMEOUT_SECONDS)
    if not timeout > 0:
        raise UsageError("--timeout must be more than 0 seconds")
    concurrency = getattr(args, "concurrency", 1)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise UsageError(f"--concurrency must be from 1 to {MAX_CONCURRENCY}")
    chosen = transport or HttpTransport(proxy=config.proxy, max_connections=concurrency)
    try:
        return ApiClient(url, transport=chosen, timeout_seconds=timeout)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _run(args: argparse.Namespace, client: ApiClient, config: CliConfig, io: Streams) -> int:
    command = args.command
    colour = config.colour and _is_terminal(io.out)
    if command in MUTATIONS:
        targets = _targets(args, io.stdin)
        single = len(targets) == 1 and not args.file
        return run_mutation(
            MUTATIONS[command],
            client,
            targets,
            single=single,
            concurrency=args.concurrency,
            out=io.out,
            error=io.error,
            as_json=io.as_json,
            waiting=_waiting(args),
        )
    if command == "set":
        return run_mutation(
            CHANGE,
            client,
            [_change(args, client)],
            single=True,
            concurrency=1,
            out=io.out,
            error=io.error,
            as_json=io.as_json,
        )
    elif command == "get":
        stream = client.get_stream(_stream_id(args.id))
        _emit(io, stream, stream_detail(stream, now_ms(), colour=colour))
    elif command == "ls":
        streams = list(
            client.list_streams(state=args.state, connection_state=args.connection_state)
        )
        lines = ["no streams"]
        if streams:
            troubled_first = sorted(streams, key=lambda s: trouble_of(s) is None)
            width = shutil.get_terminal_size().columns if _is_terminal(io.out) else None
            lines = stream_lines(troubled_first, now_ms(), colour=colour, width=width)
            lines += [summary] if (summary := trouble_summary(streams)) else []
        _emit(io, {"streams": streams}, lines)
    elif command == "workers":
        workers = client.list_workers()
        rows = [worker_row(w) for w in workers]
        lines = table(WORKER_HEADERS, rows, right="STREAMS,PID") if rows else ["no live workers"]
        _emit(io, {"workers": workers}, lines)
    elif command == "secret":
        try:
            check_secret_name(args.name)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        store = store_for(client)
        started = time.monotonic()
        done = put_secret(store, args.name, read_value(io.stdin, args.name))
        where = store.describe("Secrets Manager")
        result = {"id": args.name, "result": done["result"], "arn": done["arn"]}
        document = results_document([result], {done["result"]: 1}, time.monotonic() - started)
        _emit(io, document, [f"{done['result']} secret {args.name} in {where}"])
    elif command == "consume":
        return run_consume(
            args,
            lambda: target_for(client),
            configured_stream=config.settings.kinesis_stream_name,
            out=io.out,
            err=io.err,
            as_json=io.as_json,
        )
    elif command == "watch":
        if not args.interval > 0:
            raise UsageError("--interval must be more than 0 seconds")
        return watch(
            client,
            io.out,
            interval_seconds=args.interval,
            once=args.once,
            as_json=io.as_json,
            colour=config.colour,
        )
    return EXIT_OK


def _change(args: argparse.Namespace, client: ApiClient) -> Target:
    """``set``: the flags applied to the stream's current profile (``--profile`` replaces it),
    as the target of one PATCH."""
    _stream_id(args.id)
    if args.url is None and not has_profile_flags(args):
        raise UsageError("set needs --url or a profile flag (--header, --profile, ...)")
    profile = None
    if has_profile_flags(args):
        try:
            profile = profile_from_args(args)  # flags that cannot be read: nothing is sent
            if args.profile is None:
                profile = profile_from_args(args, client.get_stream(args.id).get("profile"))
        except ProfileArgsError as exc:
            raise UsageError(str(exc)) from None
    return Target(args.id, args.url, profile)


def _stream_id(text: str) -> str:
    """A stream id from the command line; a :class:`UsageError` when it breaks the id rule."""
    try:
        return check_stream_id(text)
    except InputError as exc:
        raise UsageError(str(exc)) from None


def _waiting(args: argparse.Namespace) -> Waiting | None:
    if not getattr(args, "wait", False):
        return None
    if not args.wait_timeout > 0:
        raise UsageError("--wait-timeout must be more than 0 seconds")
    return Waiting(timeout_seconds=args.wait_timeout)


def _targets(args: argparse.Namespace, stdin: TextIO) -> list[Target]:
    with_url = MUTATIONS[args.command].with_url
    try:
        targets = targets_from_arguments(args.targets, with_url=with_url)
        if args.file == "-":
            targets += targets_from_lines(stdin, with_url=with_url, source="stdin")
        elif args.file:
            try:
                with open(args.file, encoding="utf-8") as handle:
                    targets += targets_from_lines(handle, with_url=with_url, source=args.file)
            except OSError as exc:
                raise InputError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        profile = profile_from_args(args) if with_url else None
    except (InputError, ProfileArgsError) as exc:
        raise UsageError(str(exc)) from None
    if not targets:
        what = MUTATIONS[args.command].metavar
        raise UsageError(f"{args.command} needs {what} arguments or -f FILE")
    if profile is not None:  # a line's own profile wins
        targets = [t if t.profile is not None else replace(t, profile=profile) for t in targets]
    return targets


def _emit(io: Streams, data: Any, lines: Sequence[str]) -> None:
    if io.as_json:
        io.out.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        io.out.write("".join(line + "\n" for line in lines))


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False


def _end_of_options(argv: Sequence[str]) -> int:
    return argv.index("--") if "--" in argv else len(argv)


def _silence(out: TextIO) -> None:
    """Point ``out``'s descriptor at /dev/null, so that the interpreter's last flush does not
    fail on the closed pipe a second time."""
    with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation is both
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())


def _one_line(text: str, limit: int = 500) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
