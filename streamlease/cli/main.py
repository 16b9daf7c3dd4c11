"""``streamlease``: the operator's command line for the streamlease API.

Exit codes: 0 success, 1 the API refused or could not be reached, 2 a usage or configuration
error. Errors are one readable line on stderr; ``--json`` prints the API's answers as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

from streamlease.cli.client import ApiClient, ApiError
from streamlease.cli.render import (
    STREAM_HEADERS,
    WORKER_HEADERS,
    stream_detail,
    stream_row,
    stream_summary,
    table,
    worker_row,
)
from streamlease.cli.signing import CredentialsMissing
from streamlease.cli.transport import Transport, TransportError
from streamlease.cli.watch import watch
from streamlease.errors import ConfigError
from streamlease.settings import Settings, env_name

PROG: Final = "streamlease"
EXIT_OK: Final = 0
EXIT_API: Final = 1
EXIT_USAGE: Final = 2


def local_api_url(settings: Settings) -> str:
    """The local stack's API (``make run``) as the settings place it."""
    return f"http://{settings.local_host}:{settings.local_api_port}"


def api_url_for(settings: Settings, explicit: str | None) -> str:
    """``--api`` if given, else ``Settings.api_url``, else the local stack's API."""
    return explicit or settings.api_url or local_api_url(settings)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (global options are accepted before or after the command)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--api",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"API base URL (default: ${env_name('api_url')}, else the local stack)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    common.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=argparse.SUPPRESS,
        help="per-request timeout in seconds (default 10)",
    )
    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[common],
        description="Start, stop and inspect streams; watch who owns them.",
        epilog="Against an execute-api URL requests are SigV4-signed with your AWS credentials.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[common], help=help_text, description=help_text)

    start = command("start", "create a stream and start it")
    start.add_argument("id", help="stream id")
    start.add_argument("url", help="upstream WebSocket URL (wss://…)")
    for name, text in (
        ("stop", "stop a stream (its owner closes it within one heartbeat)"),
        ("resume", "start a stopped stream again"),
        ("get", "show one stream"),
        ("rm", "delete a stopped stream"),
    ):
        command(name, text).add_argument("id", help="stream id")
    ls = command("ls", "list streams")
    ls.add_argument(
        "--state", type=str.upper, choices=("STARTED", "STOPPED"), help="only streams in this state"
    )
    command("workers", "list live workers")
    live = command("watch", "live view of streams and workers (Ctrl-C to leave)")
    live.add_argument("--once", action="store_true", help="print one frame and exit")
    live.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="refresh period (default 1)"
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    transport: Transport | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the CLI; returns the exit code. ``transport`` replaces the HTTP transport (tests)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = build_parser()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and the error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"{PROG}: configuration error: {exc}", file=err)
        return EXIT_USAGE
    url = api_url_for(settings, getattr(args, "api", None))
    if getattr(args, "id", "x") == "" or (args.command == "watch" and args.interval <= 0):
        print(f"{PROG}: error: stream id must not be empty and --interval must be > 0", file=err)
        return EXIT_USAGE
    try:
        client = ApiClient(url, transport=transport, timeout_seconds=getattr(args, "timeout", 10.0))
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return EXIT_USAGE
    try:
        return _run(args, client, out)
    except ApiError as exc:
        print(f"{PROG}: {_one_line(str(exc))}", file=err)
    except TransportError as exc:
        hint = " (is `make run` running?)" if url == local_api_url(settings) else ""
        print(f"{PROG}: cannot reach the API at {url}: {exc}{hint}", file=err)
    except CredentialsMissing as exc:
        print(f"{PROG}: {exc}", file=err)
    except KeyboardInterrupt:
        return 130
    return EXIT_API


def _run(args: argparse.Namespace, client: ApiClient, out: TextIO) -> int:
    as_json = getattr(args, "json", False)

    def emit(data: Any, lines: Sequence[str]) -> None:
        if as_json:
            out.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        else:
            out.write("".join(line + "\n" for line in lines))

    command = args.command
    if command == "start":
        created, stream = client.create_stream(args.id, args.url)
        verb = "created" if created else "exists, unchanged:"
        emit(stream, [f"{verb} {stream_summary(stream)}"])
    elif command == "stop":
        stream = client.stop_stream(args.id)
        emit(stream, [f"stopping {stream_summary(stream)}"])
    elif command == "resume":
        stream = client.start_stream(args.id)
        emit(stream, [f"starting {stream_summary(stream)}"])
    elif command == "get":
        stream = client.get_stream(args.id)
        emit(stream, stream_detail(stream))
    elif command == "rm":
        body = client.delete_stream(args.id)
        emit(body or {"id": args.id, "deleted": True}, [f"deleted {args.id}"])
    elif command == "ls":
        streams = list(client.list_streams(state=args.state))
        rows = [stream_row(s) for s in streams]
        lines = table(STREAM_HEADERS, rows, right="EPOCH,LAST_SEQ,TAKEOVERS") if rows else []
        emit({"streams": streams}, lines or ["no streams"])
    elif command == "workers":
        workers = client.list_workers()
        rows = [worker_row(w) for w in workers]
        lines = table(WORKER_HEADERS, rows, right="STREAMS,PID") if rows else []
        emit({"workers": workers}, lines or ["no live workers"])
    elif command == "watch":
        return watch(client, out, interval_seconds=args.interval, once=args.once, as_json=as_json)
    return EXIT_OK


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
